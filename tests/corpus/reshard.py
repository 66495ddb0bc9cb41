"""Fidelity corpus: sharded device_put and reshards on 4 devices (run with --devices 4).

Expected, by hand (float32):
* x: (16, 256) sharded 4 ways: h2d 16,384 B (4 x 4,096 B) to cpu:0-3;
* small: (8, 256) sharded 2 ways on cpu:0-1: h2d 8,192 B; moved to [cpu:0, cpu:3] in the same
  layout: the shard on cpu:0 stays, the one on cpu:1 moves to cpu:3: d2d 4,096 B;
* x, 4 ways -> 2 ways on cpu:2-3: no shard fits, JAX goes through the host: d2h 16,384 B and
  h2d 16,384 B (2 x 8,192 B);
* replicated (8, 128) on 4 devices: h2d 4 x 4,096 = 16,384 B;
* a pytree {"w": (8, 128) sharded, "n": int64[10] replicated}: h2d 4,096 B and 4 x 40 B
  (int64 arrives as int32);
* reads: one 4 B float() per printed sum (5).
"""
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

d = jax.devices()
four = NamedSharding(Mesh(np.array(d[:4]), ("x",)), P("x"))
x = jax.device_put(np.arange(16 * 256, dtype=np.float32).reshape(16, 256), four)
pair = NamedSharding(Mesh(np.array(d[:2]), ("x",)), P("x"))
small = jax.device_put(np.ones((8, 256), np.float32), pair)
moved = jax.device_put(small, NamedSharding(Mesh(np.array([d[0], d[3]]), ("x",)), P("x")))
two = jax.device_put(x, NamedSharding(Mesh(np.array(d[2:4]), ("x",)), P("x")))
rep = jax.device_put(np.ones((8, 128), np.float32), NamedSharding(Mesh(np.array(d[:4]), ("x",)), P()))
tree = jax.device_put({"w": np.ones((8, 128), np.float32), "n": np.arange(10)},
                      {"w": four, "n": NamedSharding(Mesh(np.array(d[:4]), ("x",)), P())})
for name, a in [("moved", moved), ("two", two), ("rep", rep), ("w", tree["w"]), ("n", tree["n"])]:
    print(name, a.shape, a.dtype, float(a.sum()))
