"""An SPMD data-parallel job written for a cluster: ``jax.distributed.initialize()`` with no
arguments, one global mesh over every process's devices, a host batch per step.

Per step each process builds two global arrays from its own host data:
* ``x`` (LOCAL_ROWS x COLS float32) with ``jax.make_array_from_process_local_data``;
* ``y`` (LOCAL_ROWS x COLS float32) by hand: one ``jax.device_put`` of ROWS_PER_DEVICE rows
  to each local device, joined by ``jax.make_array_from_single_device_arrays``;
then calls the jitted, sharded ``step`` (GSPMD inserts the all-reduce of the gradient).
After the loop: ``float(loss)`` once. Under ``--wait-file F`` every process writes its pid to
``F.<index>`` after step 2, and the last process waits there until its file is gone: the
others go on into step 3, whose all-reduce waits for it (so a test can kill the last process
while the others are blocked in a collective).

    python spmd_step.py [--steps 4]
"""
import argparse
import os
import time

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize()

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

COLS = 128
ROWS_PER_DEVICE = 4

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--wait-file", default="")
a = ap.parse_args()

local = jax.local_devices()
mesh = Mesh(np.array(jax.devices()), ("data",))
rows = NamedSharding(mesh, P("data"))
replicated = NamedSharding(mesh, P())
local_rows = ROWS_PER_DEVICE * len(local)
global_rows = local_rows * jax.process_count()


def zeros():
    return jnp.zeros((COLS,), jnp.float32)


init = jax.jit(zeros, out_shardings=replicated)


@jax.jit
def step(w, x, y):
    def loss_fn(w):
        return jnp.mean((x @ w - y[:, 0]) ** 2)

    loss, g = jax.value_and_grad(loss_fn)(w)
    return w - 0.1 * g, loss


w = init()
loss = None
rng = np.random.default_rng(jax.process_index())
for i in range(a.steps):
    host_x = rng.standard_normal((local_rows, COLS), dtype=np.float32)
    x = jax.make_array_from_process_local_data(rows, host_x)
    host_y = rng.standard_normal((local_rows, COLS), dtype=np.float32)
    parts = [jax.device_put(host_y[k * ROWS_PER_DEVICE:(k + 1) * ROWS_PER_DEVICE], d)
             for k, d in enumerate(local)]
    y = jax.make_array_from_single_device_arrays((global_rows, COLS), rows, parts)
    w, loss = step(w, x, y)
    # one step in flight: with several queued, the CPU runtime's gloo collectives can hang
    # (measured: 2 processes x 2 devices on 2 cores; not a transfer, nothing is recorded)
    jax.block_until_ready(loss)
    if a.wait_file and i == 1:
        mine = f"{a.wait_file}.{jax.process_index()}"
        with open(mine + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(mine + ".tmp", mine)
        while jax.process_index() == jax.process_count() - 1 and os.path.exists(mine):
            time.sleep(0.05)
print(f"process {jax.process_index()} of {jax.process_count()}: loss {float(loss):.4f}")
