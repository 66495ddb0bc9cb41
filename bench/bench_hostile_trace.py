#!/usr/bin/env python3
"""Bench row P7 (issue 15): ``jaxplace audit`` of a 4 MiB TPU trace whose ``core_details`` stat
is huge, target ≤ 5 s wall.

    python bench/bench_hostile_trace.py            # 3 audits per shape; prints the row
    python bench/bench_hostile_trace.py --runs 1

The stat's varints were decoded with unbounded big-integer shifts (quadratic: a 1 MiB trace
took 32-42 s, a 4 MiB one ~10 minutes). The traces are built by
``tests/scripts/faults/xspace.py`` (``huge_core_details_trace``, the same traces as
``tests/test_trace_limits.py``), one per shape: one endless varint, 9-byte varints, 2M
one-byte fields; and, for scale, the same trace with an 8-byte stat (a real one). Each audit
is a fresh ``python -m jaxplace_cli audit TRACE --format json``; wall is spawn to reap
(``import jax`` included, ~1.6 s of CPU here), CPU is user + sys from ``os.wait4``. The row's
value is the slowest shape's median wall. ``run_bench.py`` calls :func:`measure` for its P7
row.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 5.0
TARGET = "≤ 5 s"
WHAT = "jaxplace audit of a 4 MiB TPU trace, huge core_details stat"
SIZE = 4 * 2**20
BASELINE = "8-byte stat (baseline)"  # the same trace, 369 bytes: what any audit costs here


def _xspace():
    spec = importlib.util.spec_from_file_location("xspace", REPO / "tests" / "scripts" / "faults" / "xspace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _audit(trace: Path, timeout: float) -> dict:
    """One audit in a fresh process: exit code, wall, CPU, whether stdout is JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXPLACE_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "audit", str(trace), "--format", "json"],
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=str(REPO))
        timer = threading.Timer(timeout, proc.kill)  # a hung audit is killed, then reaped
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read().decode(errors="replace")
    try:
        json.loads(stdout)
        is_json = True
    except ValueError:
        is_json = False
    return {"exit_code": code, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024.0, "ok": code in (0, 2) and "Traceback" not in stderr
            and (is_json or code == 2), "stderr_tail": stderr[-500:]}


def measure(tmp: Path, runs: int = 3, timeout: float = 120.0, log=print, huge_shapes: int = 0) -> dict:
    """Audit the 4 MiB trace of every shape (the first ``huge_shapes`` of the huge ones, when
    not 0: the smoke test's one) ``runs`` times; the slowest shape's median wall."""
    xspace = _xspace()
    shapes = {}
    huge = list(xspace.HUGE_CORE_DETAILS)[:huge_shapes or None]
    traces = {shape: xspace.huge_core_details_trace(shape, SIZE) for shape in huge}
    traces[BASELINE] = xspace.tpu_trace(b"\x10\x01 \x01(\x050\x05")  # TPU:1 of the v6e fixture
    for shape, data in traces.items():
        trace = tmp / ("core_details_" + shape.replace(" ", "_") + ".xplane.pb")
        trace.write_bytes(data)
        audits = [_audit(trace, timeout) for _ in range(runs)]
        for a in audits:
            log(f"  {shape:<20} {a['wall_s']:7.2f} s wall {a['cpu_s']:6.2f} s CPU {a['rss_mb']:6.0f} MB"
                f"  exit {a['exit_code']}" + ("" if a["ok"] else f"  FAILED: {a['stderr_tail'][-200:]}"))
        good = [a for a in audits if a["ok"]]
        shapes[shape] = {"bytes": trace.stat().st_size, "walls_s": [round(a["wall_s"], 3) for a in audits],
                         "cpu_s": [round(a["cpu_s"], 3) for a in audits],
                         "exit_codes": [a["exit_code"] for a in audits],
                         "median_wall_s": statistics.median([a["wall_s"] for a in good]) if len(good) == runs else None,
                         "median_cpu_s": statistics.median([a["cpu_s"] for a in good]) if good else None,
                         "error": "" if len(good) == runs else next(a["stderr_tail"] for a in audits if not a["ok"])}
    failed = [k for k, s in shapes.items() if s["error"]]
    huge = [k for k in shapes if k != BASELINE]
    worst = None if failed else max(huge, key=lambda k: shapes[k]["median_wall_s"])
    return {"shapes": shapes, "worst_shape": worst, "median_wall_s": None if failed else shapes[worst]["median_wall_s"],
            "error": f"audit failed ({', '.join(failed)}): " + shapes[failed[0]]["error"][-200:] if failed else ""}


def verdict(g: dict) -> tuple[str, bool | None, float | None, str]:
    """(measured, pass, value, note) for the table."""
    v = g.get("median_wall_s")
    if v is None:
        return "n/a", False, None, g.get("error", "")
    w = g["shapes"][g["worst_shape"]]
    return (f"{v:.2f} s (slowest: {g['worst_shape']})", v <= TARGET_S, v,
            f"CPU {w['median_cpu_s']:.2f} s; " + ", ".join(f"{k} {s['median_wall_s']:.2f} s wall "
                                                         f"{s['median_cpu_s']:.2f} s CPU"
                                                         for k, s in g["shapes"].items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=WHAT)
    ap.add_argument("--runs", type=int, default=3, help="audits per shape (default 3)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per audit")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jaxplace-bench-p7-") as tmp:
        g = measure(Path(tmp), max(1, a.runs), a.timeout, log=lambda s: print(s, file=sys.stderr))
    measured, passed, _value, note = verdict(g)
    print(f"P7   {WHAT:<62} {measured:<44} {TARGET:<10} {'PASS' if passed else 'FAIL'}")
    if note:
        print(f"       {note}")
    return 0 if g.get("median_wall_s") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
