"""P7 workload: a data-parallel MLP over ``jax.distributed`` processes (gloo CPU collectives).

Each process feeds its own host batch per step (``jax.make_array_from_process_local_data``) to
one jitted SGD step over a global mesh of every process's devices; GSPMD all-reduces the
gradients across processes. ``jax.distributed.initialize()`` gets no arguments under
``jaxplace launch`` (jaxplace supplies them) and explicit ones when the bench starts the
processes by hand (``BENCH_COORDINATOR``, ``BENCH_PROCESS_ID``, ``BENCH_PROCESS_COUNT``).

    python bench/workloads/dist_mlp.py [--steps 200] [--batch 32] [--width 256]
"""
from __future__ import annotations

import argparse
import os

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
if "BENCH_PROCESS_ID" in os.environ:  # started by hand: the arguments a cluster would give
    jax.distributed.initialize(os.environ["BENCH_COORDINATOR"], int(os.environ["BENCH_PROCESS_COUNT"]),
                               int(os.environ["BENCH_PROCESS_ID"]))
else:
    jax.distributed.initialize()

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import emit, now  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def loss_fn(params, x):
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - x) ** 2)


@jax.jit
def train_step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32, help="rows per process and step")
    ap.add_argument("--width", type=int, default=256)
    a = ap.parse_args()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    w = a.width
    init = jax.jit(lambda k: {"w1": jax.random.normal(k, (w, w)) * 0.04,
                              "w2": jax.random.normal(k, (w, w)) * 0.04}, out_shardings=replicated)
    params = init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(jax.process_index())
    t0 = now()
    loss = None
    for _ in range(a.steps):
        x = jax.make_array_from_process_local_data(rows, rng.standard_normal((a.batch, w), dtype=np.float32))
        params, loss = train_step(params, x)
        # one step in flight: with several steps queued, the CPU runtime's collectives hung
        # (measured: 2 processes x 2 devices on 2 cores, 200 steps, twice; 100 steps passed)
        jax.block_until_ready(loss)
    jax.block_until_ready((params, loss))
    loop_s = now() - t0
    emit({"workload": "dist_mlp", "process": jax.process_index(), "processes": jax.process_count(),
          "steps": a.steps, "batch": a.batch, "width": w, "loop_s": loop_s, "loss": float(loss)})


if __name__ == "__main__":
    main()
