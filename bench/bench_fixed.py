"""Fixed cost of `jaxplace run` on a trivial script against `python` (issue 29 item 2).

Alternates: python SCRIPT, then `jaxplace run` of it from each checkout given (PYTHONPATH
roots, e.g. the base commit's tree and this one), N rounds; prints the median and spread of
wall and CPU seconds (user+sys of the process and everything it waited for) and the load, and
where the wall time went: the script prints a timestamp at its first line, after its
`import jax` and at its last line, so each run splits into start (spawn to the script's first
line: interpreter, jaxplace's imports and set-up), import jax (with the hooks' install), body
(3 ops) and end (the script's last line to the process's exit: teardown, the verdict).
With BENCH_IMPORTTIME=1 both sides run under `-X importtime` and it also prints, per module
imported on both sides, the median self time under each checkout minus python's, the largest
first, and the sum over the modules only jaxplace imports. Read that sum: the per-module
differences can mislead (bench/README.md, round 18: +72 ms in one numpy module on a host where
timing `import numpy` inside the script showed it faster under jaxplace).
Usage: [BENCH_IMPORTTIME=1] python bench/bench_fixed.py ROUNDS ROOT [ROOT...]
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = ("import time\nprint('@', time.time())\nimport jax.numpy as jnp\nprint('@', time.time())\n"
          "x = jnp.ones(3) + 1\nprint(float(x.sum()))\nprint('@', time.time())\n")
PHASES = ("start", "import jax", "body", "end")
IMPORTTIME = os.environ.get("BENCH_IMPORTTIME") == "1"


def _self_us(stderr: str) -> dict[str, int]:
    """module -> self µs from `-X importtime`'s lines (`import time: self | cumulative | name`)."""
    out = {}
    for line in stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[0].split()[-1].isdigit():
            out[parts[2].strip()] = int(parts[0].split()[-1])
    return out


def measure(cmd: list[str], env: dict) -> tuple[float, float, list[float], dict]:
    """Wall and CPU seconds of one run, its wall seconds per phase (PHASES), and its modules'
    self import µs (with BENCH_IMPORTTIME=1; else empty)."""
    if IMPORTTIME:
        cmd = [cmd[0], "-X", "importtime", *cmd[1:]]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, w0 = time.time(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE if IMPORTTIME else subprocess.DEVNULL, text=True)
    out = proc.stdout
    wall = time.perf_counter() - w0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    marks = [float(line.split()[1]) for line in out.splitlines() if line.startswith("@ ")]
    edges = [t0, *marks, t0 + wall]
    phases = [b - a for a, b in zip(edges, edges[1:])] if len(marks) == 3 else [float("nan")] * 4
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), phases, _self_us(proc.stderr or "")


def importtime_diff(name: str, runs: list, base: list) -> None:
    """The modules whose median self time differs most from python's, and jaxplace's own."""
    med = [{m: statistics.median(r[3].get(m, 0) for r in side) for m in set().union(*(r[3] for r in side))}
           for side in (runs, base)]
    both = set(med[0]) & set(med[1])
    diff = sorted(((med[0][m] - med[1][m], m) for m in both), reverse=True)
    only = sum(v for m, v in med[0].items() if m not in both)
    print(f"{'':30s} importtime: modules on both sides {sum(d for d, _ in diff) / 1e3:+.1f} ms in all, "
          f"{len(med[0]) - len(both)} only under {name}: {only / 1e3:.1f} ms; largest differences:")
    for d, m in diff[:12]:
        print(f"{'':32s}{d / 1e3:+7.2f} ms  {m} ({med[1][m] / 1e3:.2f} ms under python)")


def main() -> None:
    rounds, roots = int(sys.argv[1]), sys.argv[2:]
    tmp = Path(tempfile.mkdtemp(prefix="bench-fixed-"))
    script = tmp / "triv.py"
    script.write_text(SCRIPT)
    res: dict[str, list] = {"python": []} | {r: [] for r in roots}
    loads = []
    for i in range(rounds):
        loads.append(os.getloadavg()[0])
        res["python"].append(measure([sys.executable, str(script)], dict(os.environ)))
        for root in roots:
            # the checkout first; what PYTHONPATH already holds (where JAX may be) after it
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
            res[root].append(measure([sys.executable, "-m", "jaxplace_cli", "run", "--out", str(tmp / f"r{i}-{roots.index(root)}"),
                                      str(script)], env))
    print(f"rounds={rounds} load {min(loads):.2f}-{max(loads):.2f}")
    base = res["python"]
    for name, v in res.items():
        wall, cpu = [r[0] for r in v], [r[1] for r in v]
        dw = [w - b[0] for w, b in zip(wall, base)]
        dc = [c - b[1] for c, b in zip(cpu, base)]
        print(f"{name:30s} wall {statistics.median(wall):.3f} s [{min(wall):.3f}-{max(wall):.3f}]  "
              f"cpu {statistics.median(cpu):.3f} s [{min(cpu):.3f}-{max(cpu):.3f}]  "
              f"vs python: wall {statistics.median(dw):+.3f} cpu {statistics.median(dc):+.3f}")
        # each phase against python's in the same round (medians of the per-round differences)
        parts = [f"{p} {statistics.median(r[2][i] for r in v):.3f}"
                 + (f" ({statistics.median(r[2][i] - b[2][i] for r, b in zip(v, base)):+.3f})" if v is not base else "")
                 for i, p in enumerate(PHASES)]
        print(f"{'':30s} " + ", ".join(parts))
        if IMPORTTIME and v is not base:
            importtime_diff(name, v, base)


if __name__ == "__main__":
    main()
