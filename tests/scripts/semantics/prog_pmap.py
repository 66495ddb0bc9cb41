"""pmap with a collective over the 4 simulated devices."""
import jax
import jax.numpy as jnp

from _show import show


def main():
    n = jax.local_device_count()
    x = jnp.arange(n * 3.0).reshape(n, 3)
    out = jax.pmap(lambda v: v / jax.lax.psum(v.sum(), "i"), axis_name="i")(x)
    show("pmap psum", out)
    show("pmap result sum", out.sum())
    show("pmap devices", [str(d) for d in out.sharding.device_set] and len(out.sharding.device_set))
