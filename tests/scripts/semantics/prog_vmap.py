"""vmap with in_axes/out_axes, nested vmap, vmap of grad."""
import jax
import jax.numpy as jnp

from _show import show


def main():
    a = jnp.arange(24.0).reshape(4, 6) / 7
    b = jnp.arange(6.0) - 2.5
    show("vmap dot", jax.vmap(jnp.dot, in_axes=(0, None))(a, b))
    show("vmap out_axes", jax.vmap(lambda r: r * 2, out_axes=1)(a))
    show("nested", jax.vmap(jax.vmap(lambda p, q: p * q + 1.0))(a, a.T.reshape(4, 6)))
    show("per-example grads", jax.vmap(jax.grad(lambda w, x: jnp.sum(jnp.sin(w * x))), (None, 0))(b, a))
    show("jit vmap", jax.jit(jax.vmap(jnp.cumsum))(a))
