"""Fixed cost of `jaxplace run` on a trivial script against `python` (issue 29 item 2).

Alternates: python SCRIPT, then `jaxplace run` of it from each checkout given (PYTHONPATH
roots, e.g. the base commit's tree and this one), N rounds; prints the median and spread of
wall and CPU seconds (user+sys of the process and everything it waited for) and the load.
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

SCRIPT = "import jax.numpy as jnp\nx = jnp.ones(3) + 1\nprint(float(x.sum()))\n"


def measure(cmd: list[str], env: dict) -> tuple[float, float]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


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
            env = dict(os.environ, PYTHONPATH=root)
            res[root].append(measure([sys.executable, "-m", "jaxplace_cli", "run", "--out", str(tmp / f"r{i}-{roots.index(root)}"),
                                      str(script)], env))
    print(f"rounds={rounds} load {min(loads):.2f}-{max(loads):.2f}")
    base = res["python"]
    for name, v in res.items():
        wall, cpu = [w for w, _ in v], [c for _, c in v]
        dw = [w - b[0] for w, b in zip(wall, base)]
        dc = [c - b[1] for c, b in zip(cpu, base)]
        print(f"{name:30s} wall {statistics.median(wall):.3f} s [{min(wall):.3f}-{max(wall):.3f}]  "
              f"cpu {statistics.median(cpu):.3f} s [{min(cpu):.3f}-{max(cpu):.3f}]  "
              f"vs python: wall +{statistics.median(dw):.3f} cpu +{statistics.median(dc):.3f}")


if __name__ == "__main__":
    main()
