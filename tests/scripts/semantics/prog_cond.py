"""lax.cond, lax.switch, jnp.where and select, eagerly and under jit (and vmap of cond)."""
import jax
import jax.numpy as jnp
from jax import lax

from _show import show


def f(x):
    return lax.cond(x.sum() > 0, lambda v: v * 2.0, lambda v: -v, x)


def main():
    x = jnp.linspace(-1.0, 2.0, 5)
    show("cond eager", (f(x), f(-x)))
    show("cond jit", jax.jit(f)(x - 1.0))
    branches = [jnp.sin, jnp.cos, lambda v: v ** 3]
    show("switch", [lax.switch(i, branches, x) for i in range(3)])
    show("vmap cond", jax.vmap(lambda v: lax.cond(v > 0, jnp.exp, jnp.negative, v))(x))
    show("where", jnp.where(x > 0.5, x, jnp.zeros_like(x)))
