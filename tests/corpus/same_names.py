"""Fidelity corpus: three different jitted functions named f, and an evaluation helper
called twice per step (issue 13 item 7).

Expected: each f is compiled once (no recompile finding: they are three functions); the step
is jit(train) — 5 steps — although jit(evaluate) is called twice as often.
"""
import jax
import jax.numpy as jnp


def f(x):
    return x + 1


first = jax.jit(f)


def f(x):  # noqa: F811 - another function with the same name
    return x * 2


second = jax.jit(f)


def make():
    def f(x):
        return x - 3

    return jax.jit(f)


third = make()


@jax.jit
def train(w):
    return third(second(first(w)))


@jax.jit
def evaluate(w, k):
    return (w * k).sum()


w = jnp.ones(8)
for _ in range(5):
    w = train(w)
    total = evaluate(w, 1.0) + evaluate(w, 2.0)
print(float(w[0]), float(total), float(first(w)[0]), float(second(w)[0]), float(third(w)[0]))
