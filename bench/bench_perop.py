"""Per-op cost of the eager hooks, in-process (issue 29 item 1).

Three sides, alternated block by block so that the load of a shared machine hits them alike:
plain (no hooks), recorded with the C operator/method hooks (capture/_wrap.c) and recorded
with the Python wrappers they replaced (dispatch.wrap's closure, same spec and function).
Rows go into packed sinks, as in a run (``Recorder.attach_writer``; before round 19 they went
to the deques, ~0.3 us an op either way on the TPU host). ``jnp.add(x, y)`` is a ufunc called
directly: its hook is Python on both sides; ``jnp.sum(w, axis=0)`` (a keyword), ``jnp.dot`` and
a jitted step with a static argument took the Python rows before round 19 (bench/README.md).
Prints each side's median per-op time with its spread, and the load.
Usage: python bench/bench_perop.py [pairs] [ops_per_block]
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp


def block(fn, n: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t) / n / 1000


def swap(hooks: dict) -> None:
    from jax._src.array import ArrayImpl

    for attr, obj in hooks.items():
        setattr(ArrayImpl, attr, obj)


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    from jax._src.array import ArrayImpl
    from jax.numpy import ufunc

    from jaxplace_cli.capture import native
    from jaxplace_cli.capture.jaxhooks import dispatch
    from jaxplace_cli.capture.recorder import Recorder
    from jaxplace_cli.capture.recording import Recording

    x = jnp.ones((8,), jnp.float32)
    y = jnp.ones((8,), jnp.float32)
    w = jnp.ones((8, 8), jnp.float32)
    cases = {"x + 1.0": lambda: x + 1.0, "x + y": lambda: x + y, "jnp.add(x, y)": lambda: jnp.add(x, y),
             "x.sum()": lambda: x.sum(), "jnp.sin(x)": lambda: jnp.sin(x),
             "jnp.sum(w, axis=0)": lambda: jnp.sum(w, axis=0), "jnp.dot(x, w)": lambda: jnp.dot(x, w)}
    rec = Recorder()
    recording = Recording(rec, "all")
    recording.start()
    # a training step with a static argument: jax.jit under the hooks, so the jit hook's function
    step = jax.jit(lambda p, v, k: {"w": p["w"] * k, "b": p["b"] + v.sum()}, static_argnums=(2,))
    params = {"w": w, "b": x}
    cases["step(params, x, 3)"] = lambda: step(params, x, 3)["w"]
    for f in cases.values():  # compile outside the timing
        f().block_until_ready()
    c_hooks = {a: o for a, o in ArrayImpl.__dict__.items() if type(o).__name__ == "Wrapper"}
    py_hooks = {a: dispatch.wrap(o.__jaxplace_fn__, o.__jaxplace_spec__) for a, o in c_hooks.items()}
    c_ufunc = ufunc.__dict__["__call__"]
    py_ufunc = getattr(c_ufunc, "__wrapped__", c_ufunc)  # the Python hook behind the C one
    recording.stop()
    sides = ("plain", "C hooks", "Python hooks")
    res = {k: {s: [] for s in sides} for k in cases}
    for _ in range(pairs):
        for k, f in cases.items():
            res[k]["plain"].append(block(f, n))
        recording = Recording(rec, "all")
        recording.start()
        rec.attach_writer(lambda: None, 1 << 30)  # rows packed as a run packs them, never waited on
        try:
            for side, hooks, uf in (("C hooks", c_hooks, c_ufunc), ("Python hooks", py_hooks, py_ufunc)):
                swap(hooks)
                ufunc.__call__ = uf
                for k, f in cases.items():
                    res[k][side].append(block(f, n))
                rec.drain()
        finally:
            swap(c_hooks)
            ufunc.__call__ = c_ufunc
            recording.stop()
    print(f"capture={native.kind()} wrap={'C' if c_hooks else 'none (Python only)'} jax={jax.__version__} "
          f"pairs={pairs} ops/block={n} load={os.getloadavg()[0]:.2f}")
    for k, by in res.items():
        cells = "  ".join(f"{s} {statistics.median(v):6.2f} µs [{min(v):.2f}-{max(v):.2f}]" for s, v in by.items())
        gain = [p - c for c, p in zip(by["C hooks"], by["Python hooks"])]
        print(f"{k:18s} {cells}  Python-C {statistics.median(gain):+.2f} µs [{min(gain):+.2f}..{max(gain):+.2f}]")


if __name__ == "__main__":
    main()
