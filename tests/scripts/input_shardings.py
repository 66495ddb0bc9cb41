"""Where a jit call's inputs went, told by its compiled program's input shardings
(tests/test_fidelity_input_shardings.py). By hand, on 2 devices:

- jitted functions that return no array (they update a jax.new_ref, or return None): JAX still
  uploads their host arguments and moves an uncommitted array to where the call runs. L-loop:
  2 calls x (16 B NumPy + 4 B scalar) onto the ref's device, cpu:0; L-moved: the uncommitted
  16 B array from cpu:0 to cpu:1, and the 4 B scalar onto cpu:1; L-none: its arguments are
  unused (dropped): nothing;
- L-sharded: a call over both devices whose first argument is dropped and whose third is None
  (no leaf): w, (4, 8) float32, arrives split like x, 64 B on each device, b (8 floats) whole
  on each, 32 B, and c, a (4, 1) column, split like x's rows too: 8 B on each."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


@jax.jit
def update(ref, v, scale):
    ref[...] = ref[...] * scale + v


@jax.jit
def nothing(x, y):
    return None


@jax.jit
def affine(unused, x, nothing, w, b, c):
    return x * w + b + c


ref = jax.new_ref(jnp.zeros(4, jnp.float32))
for _ in range(2):
    update(ref, np.ones(4, np.float32), 2.0)  # L-loop
u = jnp.arange(4, dtype=jnp.float32)
ref1 = jax.new_ref(jax.device_put(jnp.zeros(4, jnp.float32), jax.devices()[1]))
update(ref1, u, 3.0)  # L-moved
nothing(np.ones(3, np.float32), 2.0)  # L-none
x = jax.device_put(jnp.ones((4, 8), jnp.float32), NamedSharding(Mesh(np.array(jax.devices()), ("x",)), P("x")))
w, b, c = np.ones((4, 8), np.float32), np.ones(8, np.float32), np.ones((4, 1), np.float32)
y = affine(np.ones(3, np.float32), x, None, w, b, c)  # L-sharded
print(ref[...].tolist(), ref1[...].tolist(), float(y.sum()))
