"""lax.while_loop (Newton's method), fori_loop, eagerly and under jit."""
import jax
import jax.numpy as jnp
from jax import lax

from _show import show


def newton_sqrt(a):
    def cond(s):
        x, i = s
        return (jnp.abs(x * x - a) > 1e-6) & (i < 50)

    def body(s):
        x, i = s
        return 0.5 * (x + a / x), i + 1

    return lax.while_loop(cond, body, (a, 0))


def main():
    show("while eager", newton_sqrt(jnp.float32(10.0)))
    show("while jit", jax.jit(newton_sqrt)(jnp.float32(2.0)))
    show("fori", lax.fori_loop(0, 7, lambda i, c: c * 1.5 + i, jnp.ones(3)))
    show("fori jit", jax.jit(lambda n: lax.fori_loop(0, n, lambda i, c: c + i * i, 0))(9))
