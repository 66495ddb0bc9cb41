"""Fixed cost of `jaxplace run` on a trivial script against `python` (issue 29 item 2).

Alternates: python SCRIPT, then `jaxplace run` of it from each checkout given (PYTHONPATH
roots, e.g. the base commit's tree and this one), N rounds; prints the median and spread of
wall and CPU seconds (user+sys of the process and everything it waited for) and the load, and
where the wall time went: the script prints a timestamp at its first line, after its
`import jax` and at its last line, so each run splits into start (spawn to the script's first
line: interpreter, jaxplace's imports and set-up), import jax (with the hooks' install), body
(3 ops) and end (the script's last line to the process's exit: teardown, the verdict).
Usage: python bench/bench_fixed.py ROUNDS ROOT [ROOT...]
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


def measure(cmd: list[str], env: dict) -> tuple[float, float, list[float]]:
    """Wall and CPU seconds of one run, and its wall seconds per phase (PHASES)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, w0 = time.time(), time.perf_counter()
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout
    wall = time.perf_counter() - w0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    marks = [float(line.split()[1]) for line in out.splitlines() if line.startswith("@ ")]
    edges = [t0, *marks, t0 + wall]
    phases = [b - a for a, b in zip(edges, edges[1:])] if len(marks) == 3 else [float("nan")] * 4
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), phases


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
        wall, cpu = [w for w, _, _ in v], [c for _, c, _ in v]
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


if __name__ == "__main__":
    main()
