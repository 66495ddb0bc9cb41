"""P2 workload: an eager op loop — N small jnp ops (default 9,000 = 3,000 iterations x 3 ops).

Each iteration on an (8, 8) float32 array: ``jnp.sin(x)``, ``x * 0.5`` and ``x + 1.0`` — a
jax.numpy function and two Array operators with a Python-scalar operand, the bread and butter
of eager JAX code. Every op is a separate dispatch through JAX's C++ fast path, so this is the
worst case for per-op recording overhead.

    python bench/workloads/eager_ops.py [--ops 9000]
"""
from __future__ import annotations

import argparse

import jax.numpy as jnp
from _common import emit, now, reference_mode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=9000, help="eager ops in the loop (a multiple of 3)")
    a = ap.parse_args()
    iters = max(1, a.ops // 3)
    with reference_mode():
        x = jnp.ones((8, 8), jnp.float32)
        t0 = now()
        for _ in range(iters):
            x = jnp.sin(x)
            x = x * 0.5
            x = x + 1.0
        x.block_until_ready()
        loop_s = now() - t0
    emit({"workload": "eager_ops", "loop_ops": 3 * iters, "loop_s": loop_s,
          "us_per_op": loop_s / (3 * iters) * 1e6})


if __name__ == "__main__":
    main()
