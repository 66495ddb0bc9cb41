"""Shared helpers of the bench workloads: reference-point modes and the result line.

Every workload reads ``BENCH_MODE`` from the environment (set by ``bench/run_bench.py``) so that
the *same* script measures JAX's own alternatives to jaxplace, without touching jaxplace:

- ``plain`` (default): nothing extra.
- ``profiler``: the whole workload runs under ``jax.profiler.trace`` with the Python tracer off
  (``python_tracer_level = 0``); trace files go to ``BENCH_TRACE_DIR`` (a temp dir).
- ``transfer_guard``: ``jax.config.update("jax_transfer_guard", "log")``.
- ``slowpath``: every jit dispatch goes through Python (``jax._src.pjit._get_fastpath_data``
  returns None), the cost of seeing arguments on every call (docs/jax-facts.md, fact 2).

The workload prints one line ``BENCH_RESULT {json}`` on stdout: its own counters (ops it
dispatched, Python-scalar operands it passed, ...) and the seconds its measured loop took.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time

MODES = ("plain", "profiler", "transfer_guard", "slowpath")


def mode() -> str:
    m = os.environ.get("BENCH_MODE", "plain") or "plain"
    if m not in MODES:
        raise SystemExit(f"BENCH_MODE must be one of {', '.join(MODES)}, not {m!r}")
    return m


@contextlib.contextmanager
def reference_mode():
    """Apply BENCH_MODE around the workload body (after JAX is imported)."""
    import jax

    m = mode()
    if m == "transfer_guard":
        jax.config.update("jax_transfer_guard", "log")
    elif m == "slowpath":
        from jax._src import pjit

        pjit._get_fastpath_data = lambda *args, **kwargs: None
    if m == "profiler":
        log_dir = os.environ.get("BENCH_TRACE_DIR") or tempfile.mkdtemp(prefix="bench-trace-")
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        with jax.profiler.trace(log_dir, profiler_options=options):
            yield m
    else:
        yield m


def emit(result: dict) -> None:
    """The one line the bench parses; flushed so a crash later still leaves it."""
    result.setdefault("mode", mode())
    sys.stdout.write("BENCH_RESULT " + json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()


now = time.perf_counter
