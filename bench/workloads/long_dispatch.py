"""P12 workload: one long first dispatch — a jitted ``fori_loop`` of N steps (default 100,000)
on a (8, 32) array, called once. The whole program is one compile and one call that runs for
seconds: the case where a trace window that opens at the first dispatch and closes "after 1 s
or 25 ops" cannot close (issue 24: x5.5 time and x6 memory), and what the steady-state
window and its watchdog (capture/jaxhooks/trace_window.py) must keep near plain python.

    python bench/workloads/long_dispatch.py [--steps 100000]
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from _common import emit, now, reference_mode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000, help="fori_loop steps of the one call")
    a = ap.parse_args()
    with reference_mode():
        @jax.jit
        def run(x, w):
            return jax.lax.fori_loop(0, a.steps, lambda i, v: jnp.tanh(v @ w) + jnp.sin(v) * 0.1, x)

        t0 = now()
        out = run(jnp.ones((8, 32)), jnp.eye(32) * 0.5).block_until_ready()
        loop_s = now() - t0
    emit({"workload": "long_dispatch", "steps": a.steps, "loop_s": loop_s, "checksum": float(out.sum())})


if __name__ == "__main__":
    main()
