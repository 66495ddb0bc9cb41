"""pure_callback into numpy from jit and vmap; jax.debug.print and jax.debug.callback."""
import jax
import jax.numpy as jnp
import numpy as np

from _show import show


def host_sort(x):
    return np.sort(np.asarray(x))[::-1].copy()


def main():
    x = jnp.array([3.0, -1.0, 2.5, 0.0])
    f = jax.jit(lambda v: jax.pure_callback(host_sort, jax.ShapeDtypeStruct(v.shape, v.dtype), v) * 2)
    show("pure_callback", f(x))
    show("pure_callback vmap", jax.vmap(lambda v: jax.pure_callback(host_sort, jax.ShapeDtypeStruct(v.shape, v.dtype), v, vmap_method="sequential"))(jnp.stack([x, -x])))

    @jax.jit
    def g(v):
        jax.debug.print("debug.print in jit: {v} sum={s}", v=v, s=v.sum(), ordered=True)
        jax.debug.callback(lambda a: print("debug.callback:", np.asarray(a).tolist()), v * 2, ordered=True)
        return v + 1

    show("after debug", jax.block_until_ready(g(x)))
    jax.debug.print("debug.print eager: {}", x[0])
    jax.effects_barrier()
