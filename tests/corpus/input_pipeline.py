"""Fidelity corpus: a sharded input pipeline on 8 devices (run with --devices 8).

Each of 4 iterations feeds a (16, 1024) float32 batch (65,536 B) through the three ways a
multi-device pipeline uploads: make_array_from_process_local_data, device_put with a
sharding, make_array_from_callback. Expected h2d: 3 x 4 x 65,536 = 786,432 B, plus the
numpy weights each step: 4 x 262,144 B.
"""
import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((8,), ("data",))
batch_sharding = NamedSharding(mesh, P("data"))
# host weights passed to every step: replicated by the compiled program, 8 x 32,768 B a call
w = np.full((1024, 8), 0.01, np.float32)


@jax.jit
def step(w, a, b, c):
    return ((a + b + c) @ w).sum()


total = 0.0
for i in range(4):
    batch = np.full((16, 1024), float(i), np.float32)
    a = jax.make_array_from_process_local_data(batch_sharding, batch)
    b = jax.device_put(batch, batch_sharding)
    c = jax.make_array_from_callback(batch.shape, batch_sharding, lambda idx, batch=batch: batch[idx])
    total += float(step(w, a, b, c))
print(f"total {total:.0f}")  # float32 sums differ in the last digit across CPUs
