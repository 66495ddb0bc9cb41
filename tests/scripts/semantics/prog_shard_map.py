"""shard_map and jit over a 4-device mesh with NamedSharding inputs."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

from _show import show


def main():
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    x = jnp.arange(32.0).reshape(8, 4)

    def local(block):
        return block * 2.0 + jax.lax.psum(block.sum(), "x")

    f = jax.jit(shard_map(local, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    show("shard_map", f(x))
    xs = jax.device_put(x, NamedSharding(mesh, P("x")))
    y = jax.jit(lambda a: jnp.tanh(a) @ a.T)(xs)
    show("sharded jit", y)
    show("sharded eager", (xs * 3.0).sum(axis=0))
