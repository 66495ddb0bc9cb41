"""Buffer donation in a jitted update loop."""
import jax
import jax.numpy as jnp

from _show import show


def main():
    update = jax.jit(lambda w, g: w - 0.1 * g, donate_argnums=0)
    w = jnp.ones((16, 16))
    g = jnp.linspace(0.0, 1.0, 256).reshape(16, 16)
    for _ in range(5):
        w = update(w, g)
    show("donated", w)
    state = {"a": jnp.zeros(4), "n": jnp.int32(0)}
    step = jax.jit(lambda s: {"a": s["a"] + s["n"], "n": s["n"] + 1}, donate_argnums=0)
    for _ in range(4):
        state = step(state)
    show("donated pytree", state)
