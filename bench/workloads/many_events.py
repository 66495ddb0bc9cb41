"""P3/P4/P6 workload: a run that generates a given number of jaxplace events (default 1M).

From ``--threads`` threads (default 2), each iteration dispatches
- two tiny eager ops on an (8, 8) float32 array, ``x = x * 0.5`` and ``x = x + 0.25``: under
  ``jaxplace run`` each is an ``ops`` row, a ``buffers`` row (its new result) and a
  ``transfers`` row (the Python scalar operand is a tiny host->device upload): 6 rows;
- one call of a jitted "wide" function with ``--wide K`` Python-scalar arguments and K small
  results (default K = 32): 1 op, K scalar uploads, K new buffers = 1 + 2K rows.
The wide call is there because eager dispatch alone cannot produce events fast enough on a
small machine to test a recorder's throughput (P6); ``--wide 0`` leaves only eager ops.

The script counts what it dispatched itself (``ops``, ``scalar_operands``, ``new_arrays``), so
the bench can check that the run store holds every event (none lost) and compute the
recorder's sustained throughput from the loop time.

    python bench/workloads/many_events.py [--events 1000000] [--threads 2] [--wide 32]
"""
from __future__ import annotations

import argparse
import threading

import jax
import jax.numpy as jnp
from _common import emit, now, reference_mode


@jax.jit
def wide(x, *scalars):
    return tuple(x * s for s in scalars)


def rows_per_iter(k: int) -> int:
    return 6 + (1 + 2 * k if k else 0)


def worker(iters: int, k: int, counts: list, i: int) -> None:
    scalars = [1.0 + j / 64 for j in range(k)]
    x = jnp.ones((8, 8), jnp.float32)  # 1 op, 1 new array, 1 h2d leg (the fill value)
    outs = ()
    for _ in range(iters):
        x = x * 0.5
        x = x + 0.25
        if k:
            outs = wide(x, *scalars)
    jax.block_until_ready((x, outs))
    ops = 1 + iters * (3 if k else 2)
    counts[i] = {"ops": ops, "scalar_operands": 1 + iters * (2 + k), "new_arrays": 1 + iters * (2 + k)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000,
                    help="events to generate under jaxplace (ops + transfers + buffers rows)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wide", type=int, default=32, help="scalar args/results of the jit call (0: none)")
    a = ap.parse_args()
    n_threads = max(1, a.threads)
    k = max(0, a.wide)
    iters = max(1, a.events // rows_per_iter(k) // n_threads)
    counts: list = [None] * n_threads
    with reference_mode():
        jnp.ones((8, 8)).block_until_ready()  # warm-up: 1 op, 1 new array, 1 h2d leg (fill value)
        if k:
            jax.block_until_ready(wide(jnp.ones((8, 8)), *([1.0] * k)))  # compile: 2 ops, 1 + k uploads, 1 + k arrays
        t0 = now()
        threads = [threading.Thread(target=worker, args=(iters, k, counts, i), name=f"bench-{i}")
                   for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        loop_s = now() - t0
    ops = 1 + sum(c["ops"] for c in counts)
    scalars = 1 + sum(c["scalar_operands"] for c in counts)
    arrays = 1 + sum(c["new_arrays"] for c in counts)
    if k:
        ops, scalars, arrays = ops + 2, scalars + 1 + k, arrays + 1 + k
    loop_events = sum(c["ops"] + c["scalar_operands"] + c["new_arrays"] for c in counts)
    emit({"workload": "many_events", "threads": n_threads, "wide": k, "iters_per_thread": iters,
          "ops": ops, "scalar_operands": scalars, "new_arrays": arrays,
          "expected_events": ops + scalars + arrays, "loop_events": loop_events, "loop_s": loop_s})


if __name__ == "__main__":
    main()
