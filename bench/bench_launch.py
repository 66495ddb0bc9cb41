#!/usr/bin/env python3
"""P11: ``jaxplace launch -n 2`` against the same 2-process job started by hand with python.

    python bench/bench_launch.py [--pairs 3] [--steps 300] [--json PATH]   # or run_bench.py --only P11

The job is bench/workloads/dist_mlp.py: 2 processes x 2 simulated CPU devices, gloo
collectives, a jitted data-parallel step over the global mesh and a host batch per step.

* by hand: two ``python dist_mlp.py`` processes, started together, with the arguments a
  cluster would give (``BENCH_COORDINATOR`` on a free loopback port, ``BENCH_PROCESS_ID``,
  ``BENCH_PROCESS_COUNT``) and ``--xla_force_host_platform_device_count=2``;
* ``jaxplace launch -n 2 --devices-per-process 2 --out TMP dist_mlp.py``: the same job, every
  process recorded (default settings: trace window on), ``initialize()`` without arguments;
* ``jaxplace launch ... --trace off`` (first round only): what the trace window costs.

Wall time is spawn to the last process reaped, alternating A B A B (drift hits both alike);
the ratio is the median of the per-pair ratios. The target (issue 17) is ≤ ×1.10. CPU seconds
(user + system of every process, from ``wait4``) are reported beside it: on a shared machine
the wall ratio of one pair swings by ±20 % with the neighbours' load.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WORKLOAD = BENCH / "workloads" / "dist_mlp.py"
PY = sys.executable
RESULT = "BENCH_RESULT "
TARGET = 1.10


def _env(devices: int | None) -> dict:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    if devices:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("JAXPLACE_DEBUG", None)
    return env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _results(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        at = line.find(RESULT)  # launch prefixes each line with [pN]
        if at >= 0:
            out.append(json.loads(line[at + len(RESULT):]))
    return out


def _spawn(argv: list[str], env: dict, tmp: Path, name: str):
    out, err = open(tmp / f"{name}.out", "w+"), open(tmp / f"{name}.err", "w+")
    p = subprocess.Popen(argv, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
                         cwd=str(REPO))
    return p, out, err


def _reap(spawned, timeout: float) -> tuple[list[int], float, list[str], str]:
    """Wait for every process (SIGKILL after ``timeout``: a jax.distributed process takes
    SIGTERM as a preemption notice); exit codes, CPU seconds (user + system, each process with
    the descendants it reaped: launch's processes and their writers), stdouts, last stderr."""
    timers = [threading.Timer(timeout, p.kill) for p, _, _ in spawned]
    for t in timers:
        t.start()
    codes, cpu, outs, err_tail = [], 0.0, [], ""
    try:
        for p, out, err in spawned:
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            codes.append(p.returncode)
            cpu += ru.ru_utime + ru.ru_stime
            out.seek(0)
            err.seek(0)
            outs.append(out.read())
            err_tail = err.read()[-1500:]
            out.close()
            err.close()
    finally:
        for t in timers:
            t.cancel()
    return codes, cpu, outs, err_tail


def by_hand(args: list[str], tmp: Path, timeout: float) -> dict:
    """Both processes at once, as a cluster launcher would start them; wall to the last reaped."""
    env = _env(2)
    env.update(BENCH_COORDINATOR=f"127.0.0.1:{_port()}", BENCH_PROCESS_COUNT="2")
    t0 = time.perf_counter()
    spawned = [_spawn([PY, str(WORKLOAD), *args], dict(env, BENCH_PROCESS_ID=str(i)), tmp, f"hand{i}")
               for i in range(2)]
    codes, cpu, outs, err = _reap(spawned, timeout)
    wall = time.perf_counter() - t0
    results = [r for o in outs for r in _results(o)]
    return {"config": "by hand", "wall_s": wall, "cpu_s": cpu, "exit_codes": codes, "results": results,
            "ok": codes == [0, 0] and len(results) == 2, "stderr_tail": err}


def launched(args: list[str], tmp: Path, timeout: float, extra: list[str], n: int) -> dict:
    out = tmp / f"job-{n}"
    argv = [PY, "-m", "jaxplace_cli", "launch", "-n", "2", "--devices-per-process", "2", *extra,
            "--out", str(out), str(WORKLOAD), *args]
    t0 = time.perf_counter()
    codes, cpu, outs, err = _reap([_spawn(argv, _env(None), tmp, "launch")], timeout)
    wall = time.perf_counter() - t0
    results = _results(outs[0])
    shutil.rmtree(out, ignore_errors=True)
    return {"config": "jaxplace launch" + (" " + " ".join(extra) if extra else ""), "wall_s": wall,
            "cpu_s": cpu, "exit_codes": codes, "results": results,
            "ok": codes == [0] and len(results) == 2, "stderr_tail": err}


def launch_group(pairs: int, steps: int, tmp: Path, timeout: float = 600, log=print, extras: int = 1) -> dict:
    """Alternating runs; ``extras`` rounds also run ``--trace off``. Returns the P11 group."""
    args = ["--steps", str(steps)]
    runs: dict[str, list] = {"by hand": [], "jaxplace launch": [], "jaxplace launch --trace off": []}
    for i in range(pairs):
        log(f" round {i + 1}")
        for r in (by_hand(args, tmp, timeout), launched(args, tmp, timeout, [], 2 * i),
                  *([launched(args, tmp, timeout, ["--trace", "off"], 2 * i + 1)] if i < extras else [])):
            runs[r["config"]].append(r)
            loop = max((x.get("loop_s") or 0 for x in r["results"]), default=0)
            log(f"  dist_mlp.py x2       {r['config']:<28} {r['wall_s']:7.2f} s  loop {loop:5.2f} s"
                f"  cpu {r['cpu_s']:6.2f} s"
                + ("" if r["ok"] else f"  FAILED {r['exit_codes']}: {r['stderr_tail'][-300:]}"))
    pairs_ok = [(a, b) for a, b in zip(runs["by hand"], runs["jaxplace launch"]) if a["ok"] and b["ok"]]
    ratios = [b["wall_s"] / a["wall_s"] for a, b in pairs_ok]
    cpu = [b["cpu_s"] / a["cpu_s"] for a, b in pairs_ok if a["cpu_s"]]
    off = [b["wall_s"] / a["wall_s"] for a, b in zip(runs["by hand"], runs["jaxplace launch --trace off"])
           if a["ok"] and b["ok"]]

    def med(xs):
        return statistics.median(xs) if xs else None

    return {"workload": "dist_mlp.py", "args": args, "processes": 2, "devices_per_process": 2,
            "walls_s": {c: [round(r["wall_s"], 3) for r in rs] for c, rs in runs.items()},
            "pair_wall_ratios": [round(x, 4) for x in ratios], "median_wall_ratio": med(ratios),
            "trace_off_ratios": [round(x, 4) for x in off], "median_trace_off_ratio": med(off),
            # CPU seconds of every process (launch: with its processes and their writers): what
            # the job costs the machine, less sensitive than wall to a shared box's load
            "pair_cpu_ratios": [round(x, 4) for x in cpu], "median_cpu_ratio": med(cpu),
            "median_wall_s": {c: med([r["wall_s"] for r in rs if r["ok"]]) for c, rs in runs.items()},
            "errors": [f"{r['config']}: exit {r['exit_codes']}: {r['stderr_tail'][-300:]}"
                       for rs in runs.values() for r in rs if not r["ok"]]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="P7: jaxplace launch -n 2 vs the same job by hand")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="jaxplace-bench-launch-"))
    try:
        g = launch_group(a.pairs, a.steps, tmp, log=lambda m: print(m, file=sys.stderr, flush=True))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    v = g["median_wall_ratio"]
    print(f"P7 launch -n 2 vs by hand: {'n/a' if v is None else f'×{v:.3f}'} (target ≤ ×{TARGET:.2f}); "
          f"pairs {g['pair_wall_ratios']}; --trace off {g['trace_off_ratios']}; "
          f"CPU ×{g['median_cpu_ratio'] or 0:.3f} {g['pair_cpu_ratios']}; "
          f"median walls {json.dumps({k: v and round(v, 2) for k, v in g['median_wall_s'].items()})}")
    if a.json:
        a.json.write_text(json.dumps(g, indent=1) + "\n")
    return 0 if v is not None else 1


if __name__ == "__main__":
    sys.exit(main())
