"""`make gpu-check`: on a machine with a GPU, does jaxplace count what the hardware copied?

For each sample script that runs on this machine (under plain python first; one that needs
more devices than there are is skipped, with the reason), record it with
`jaxplace run --trace full` and compare, per kind (h2d, d2h, d2d), jaxplace's own transfers
(count and bytes, every size) with the memcpy events of the native profiler trace of the same
run, which covers the whole run (`MemcpyH2D`/`MemcpyD2H`/`MemcpyD2D`/`MemcpyP2P` with their
`memcpy_details` sizes, read by jaxplace_cli.sources.xplane). Prints one table; exits 1 when
any count or byte total differs, 0 when all agree.

On a machine without a GPU it prints one line, `gpu-check: skipped: no GPU (...)`, and exits 0:
the CPU backend has no memcpy events to compare with.

    python bench/gpu_check.py [--out DIR] [SCRIPT ...]   # default: every sample script
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KINDS = ("h2d", "d2h", "d2d")


def gpu_devices() -> tuple[int, str]:
    """(number of GPU devices JAX sees, what it sees) — asked in a child python, so this
    process never starts a backend."""
    code = ("import jax\nds = jax.devices()\n"
            "print(sum(d.platform == 'gpu' for d in ds), ','.join(sorted({d.platform for d in ds})))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"could not ask JAX: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return 0, f"JAX failed to start: {last}"
    n, platforms = proc.stdout.split()
    return int(n), platforms


def jaxplace_totals(run_dir: Path) -> dict[str, tuple[int, int]]:
    from jaxplace_cli.store.layout import EVENTS
    from jaxplace_cli.store.reader import StoreReader

    totals = {k: [0, 0] for k in KINDS}
    reader = StoreReader(run_dir / EVENTS)
    try:
        for t in reader.transfers():
            if t.kind in totals:
                totals[t.kind][0] += 1
                totals[t.kind][1] += max(t.bytes, 0)
    finally:
        reader.close()
    return {k: tuple(v) for k, v in totals.items()}


def trace_totals(run_dir: Path) -> tuple[dict[str, tuple[int, int]], list[str]]:
    from jaxplace_cli.sources.xplane import read_traces

    totals = {k: [0, 0] for k in KINDS}
    notes: list[str] = []
    for trace in read_traces(run_dir):
        notes += trace.notes
        for t in trace.transfers:
            if t.kind in totals:
                totals[t.kind][0] += 1
                totals[t.kind][1] += max(t.bytes, 0)
    return {k: tuple(v) for k, v in totals.items()}, notes


def check(script: Path, out: Path) -> tuple[str, list[str]]:
    """("match" | "differs" | "skipped: why", table lines)."""
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    if plain.returncode != 0:
        last = (plain.stderr.strip().splitlines() or ["?"])[-1]
        return f"skipped: fails under plain python here ({last[:120]})", []
    run_dir = out / script.stem
    rec = subprocess.run([sys.executable, "-m", "jaxplace_cli", "run", "--trace", "full", "--quiet",
                          "--out", str(run_dir), str(script)], capture_output=True, text=True, timeout=900)
    if rec.returncode != plain.returncode:
        return f"differs: exit {rec.returncode} under jaxplace, {plain.returncode} under python", []
    ours = jaxplace_totals(run_dir)
    theirs, notes = trace_totals(run_dir)
    lines, same = [], True
    for k in KINDS:
        ok = ours[k] == theirs[k]
        same &= ok
        lines.append(f"  {k}: jaxplace {ours[k][0]} / {ours[k][1]:,} B   trace memcpy {theirs[k][0]} / "
                     f"{theirs[k][1]:,} B   {'ok' if ok else 'DIFFERS'}")
    lines += [f"  note: {n}" for n in notes]
    return ("match" if same else "differs"), lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where the runs go (default: a temporary directory)")
    ap.add_argument("scripts", nargs="*", type=Path)
    args = ap.parse_args(argv)
    n, seen = gpu_devices()
    if n == 0:
        print(f"gpu-check: skipped: no GPU (JAX sees: {seen}); the CPU backend has no memcpy "
              "events to compare jaxplace's transfers with")
        return 0
    scripts = args.scripts or sorted((REPO / "sample_scripts").glob("*.py"))
    with tempfile.TemporaryDirectory(prefix="jaxplace-gpu-check-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        verdicts = []
        for script in scripts:
            verdict, lines = check(script, out)
            verdicts.append(verdict)
            print(f"{script.name}: {verdict}")
            for line in lines:
                print(line)
    bad = sum(v.startswith("differs") for v in verdicts)
    checked = sum(not v.startswith("skipped") for v in verdicts)
    print(f"gpu-check: {checked} script(s) compared on {n} GPU(s), {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
