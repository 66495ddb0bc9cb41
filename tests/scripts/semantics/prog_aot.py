"""Functions compiled ahead of time (``jax.jit(f).lower(...).compile()``), called in a loop:
positional and keyword arguments, a static argument, an argument the program drops, a NumPy
argument. Under a policy they run where they were compiled (no policy places them)."""
import jax
import jax.numpy as jnp
import numpy as np

from _show import show


def f(x, a, unused, *, scale=1.0):
    return (x * a + 1.0) * scale


def main():
    x = jnp.arange(6.0).reshape(2, 3)
    n = np.ones((2, 3), np.float32)
    c = jax.jit(f).lower(x, 2.0, n, scale=3.0).compile()
    for i in range(3):
        x = c(x, 2.0, n, scale=3.0) / 10.0
    show("compiled", x)
    c2 = jax.jit(f, static_argnums=1).lower(n, 4.0, x).compile()
    show("compiled static", c2(n, x))
