"""`make accel-check`: on a machine with an accelerator (TPU or GPU), does jaxplace record
exactly the transfers JAX's own transfer guard logs, and does the script run as under python?

The semantics driver (tests/scripts/semantics/run_all.py: the semantics programs, every sample
script and every corpus program, in one process, each under a ``== name ==`` header) runs
twice, each one process (opening a TPU costs ~15 s a process):
- the oracle: plain python with ``JAX_TRANSFER_GUARD=log_explicit`` and JAX's C++ fast path
  withheld, so every leg is logged with its aval (tests/test_library_corpus.py does the same
  on the CPU); stdout and stderr in one stream, so each guard line falls in its program's
  section;
- ``jaxplace run --no-trace`` of the same command.
Prints, per kind (h2d, d2h, d2d), the guard's legs and bytes beside jaxplace's, then the
programs whose stdout differs from the oracle's (guard lines removed), the run's capture path
and writer, whether device memory_stats were sampled (issue 27), and the audit's exit code.
Exits 1 when a count, a byte total or a program's output differs; 0 when all agree.

On a machine whose JAX sees only CPUs it prints ``accel-check: skipped: ...`` and exits 0
(tests/test_fidelity_*.py and tests/test_library_corpus.py check the same on simulated CPUs).

    python bench/accel_check.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEMANTICS = REPO / "tests" / "scripts" / "semantics"
CORPUS = REPO / "tests" / "corpus"
KINDS = ("h2d", "d2h", "d2d")
_ORACLE = ("import os, runpy, sys; import jax._src.pjit as p; "
           "p._get_fastpath_data = lambda *a, **k: None; "
           "sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0]))); "
           "runpy.run_path(sys.argv[0], run_name='__main__')")
_LEG = re.compile(r"(host-to-device|device-to-host|device-to-device) transfer: "
                  r"(?:aval=ShapedArray\((\w+)\[([\d,]*)\])?")
_KIND = {"host-to-device": "h2d", "device-to-host": "d2h", "device-to-device": "d2d"}
_GUARD_LINE = re.compile(r"^[WIEF]\d{4} .*\] (host-to-device|device-to-host|device-to-device) transfer")


def driver() -> list[str]:
    corpus = [str(p) for p in sorted(CORPUS.glob("*.py"))]
    return [str(SEMANTICS / "run_all.py"), "--samples", str(REPO / "sample_scripts"), *corpus,
            f"{CORPUS / 'training_loop.py'}::--sync", f"{CORPUS / 'x64.py'}::on"]


def platform() -> tuple[str, str]:
    code = "import jax; ds = jax.devices(); print(ds[0].platform, len(ds), ds[0].device_kind.replace(' ', '_'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return "", (proc.stderr.strip().splitlines() or ["?"])[-1]
    plat, n, kind = proc.stdout.split()
    return plat, f"{n} x {kind}"


def sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = "(before)"
    for line in text.splitlines():
        if line.startswith("== ") and line.endswith(" =="):
            current = line[3:-3]
            out.setdefault(current, [])
        else:
            out.setdefault(current, []).append(line)
    return out


def guard_legs(lines: list[str]) -> dict[str, list]:
    """{kind: [legs, bytes, legs without an aval]} of the guard lines among ``lines``."""
    import numpy as np

    out = {k: [0, 0, 0] for k in KINDS}
    for line in lines:
        m = _LEG.search(line)
        if not m:
            continue
        row = out[_KIND[m.group(1)]]
        row[0] += 1
        if m.group(2):
            shape = [int(d) for d in m.group(3).split(",") if d]
            row[1] += int(np.prod(shape, dtype=np.int64)) * np.dtype(m.group(2)).itemsize
        else:
            row[2] += 1
    return out


def recorded(run: Path) -> dict[str, list]:
    con = sqlite3.connect(run / "events.sqlite")
    try:
        rows = {r[0]: [r[1], r[2] or 0, r[3]] for r in con.execute(
            "SELECT kind, COUNT(*), SUM(bytes), SUM(bytes IS NULL OR bytes < 0) FROM transfers GROUP BY kind")}
    finally:
        con.close()
    return {k: rows.get(k, [0, 0, 0]) for k in KINDS}


def _run(cmd: list[str], cwd: Path, env: dict, timeout: float, merge: bool = False):
    """subprocess.run, but a run past ``timeout`` is killed and kept (returncode "timeout"), so
    the programs it finished are still compared."""
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, text=True, timeout=timeout, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merge else subprocess.PIPE)
    except subprocess.TimeoutExpired as exc:
        def text(b):
            return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")
        return subprocess.CompletedProcess(cmd, "timeout", text(exc.stdout), text(exc.stderr))


def per_file(per_program: dict, run: Path) -> list:
    """(file, kind, guard (legs, bytes), jaxplace (legs, bytes)) where they differ, h2d and d2d:
    the guard's legs by the program whose section they fall in, jaxplace's by the file of their
    site (a program run twice, as training_loop.py, adds up in both). d2h is left out: the
    semantics programs print through _show.py, where jaxplace puts their reads."""
    import collections

    guard: dict = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    for name, kinds in per_program.items():
        f = name.split()[1] if name.startswith(("sample ", "program ")) else f"prog_{name}.py"
        for k in ("h2d", "d2d"):
            guard[f][k][0] += kinds[k][0]
            guard[f][k][1] += kinds[k][1]
    con = sqlite3.connect(run / "events.sqlite")
    try:
        mine: dict = collections.defaultdict(dict)
        for file, kind, n, b in con.execute(
                "SELECT s.file, t.kind, COUNT(*), SUM(t.bytes) FROM transfers t LEFT JOIN sites s ON s.id = t.site"
                " GROUP BY s.file, t.kind"):
            mine[Path(file or "?").name][kind] = (n, b or 0)
    finally:
        con.close()
    out = []
    for f in sorted(set(guard) | set(mine)):
        for k in ("h2d", "d2d"):
            g, m = tuple(guard[f][k]) if f in guard else (0, 0), mine.get(f, {}).get(k, (0, 0))
            if g != tuple(m):
                out.append((f, k, g, tuple(m)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="keep the run and a JSON summary here")
    ap.add_argument("--timeout", type=float, default=280, help="seconds for each of the two runs")
    ap.add_argument("--cpu", action="store_true",
                    help="run on the CPU too (to try this script: the CPU backend logs no d2h leg, so d2h is not compared)")
    a = ap.parse_args()
    plat, what = platform()
    if plat == "" or (plat == "cpu" and not a.cpu):
        print(f"accel-check: skipped: no accelerator ({what or 'cpu'})")
        return 0
    out = a.out or Path(tempfile.mkdtemp(prefix="accel-check-"))
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("JAX_TRANSFER_GUARD", None)
    print(f"accel-check: {plat}, {what}; {len(driver()) - 2} entries (semantics programs, samples, corpus)",
          flush=True)

    t0 = time.perf_counter()
    oracle = _run([sys.executable, "-c", _ORACLE, *driver()], out, dict(env, JAX_TRANSFER_GUARD="log_explicit"),
                  a.timeout, merge=True)
    t1 = time.perf_counter()
    run = out / "run"
    rec = _run([sys.executable, "-m", "jaxplace_cli", "run", "-q", "--no-trace", "--out", str(run), *driver()],
               out, env, a.timeout)
    t2 = time.perf_counter()
    print(f"oracle exit {oracle.returncode} ({t1 - t0:.0f} s), jaxplace run exit {rec.returncode} ({t2 - t1:.0f} s)")
    (out / "oracle.txt").write_text(oracle.stdout)
    (out / "jaxplace.stdout.txt").write_text(rec.stdout)
    (out / "jaxplace.stderr.txt").write_text(rec.stderr)

    oracle_sec = sections(oracle.stdout)
    guard = guard_legs(oracle.stdout.splitlines())
    mine = recorded(run) if (run / "events.sqlite").exists() else {k: [0, 0, 0] for k in KINDS}
    bad = []
    print(f"{'kind':5} {'guard legs':>11} {'guard bytes':>13} {'no aval':>8} {'jaxplace legs':>14} "
          f"{'jaxplace bytes':>15}  result")
    for k in KINDS:
        g, m = guard[k], mine[k]
        same = g[0] == m[0] and (g[2] > 0 or g[1] == m[1])
        if plat == "cpu" and k == "d2h":
            print(f"{k:5} {'-':>11} {'-':>13} {'-':>8} {m[0]:>14,} {m[1]:>15,}  not compared (CPU)")
            continue
        if not same:
            bad.append(k)
        print(f"{k:5} {g[0]:>11,} {g[1]:>13,} {g[2]:>8,} {m[0]:>14,} {m[1]:>15,}  {'same' if same else 'DIFFERS'}")
    per_program = {name: guard_legs(lines) for name, lines in oracle_sec.items()}
    by_file = per_file(per_program, run) if (run / "events.sqlite").exists() else []
    for f, k, g, m in by_file:
        print(f"  differs: {f} {k}: guard {g[0]} legs {g[1]:,} B, jaxplace {m[0]} legs {m[1]:,} B")

    rec_sec = sections(rec.stdout)
    differ = [name for name, lines in oracle_sec.items()
              if [x for x in lines if not _GUARD_LINE.match(x)] != rec_sec.get(name)]
    differ += [name for name in rec_sec if name not in oracle_sec]
    print(f"programs: {len(oracle_sec)} in the oracle, {len(rec_sec)} under jaxplace; "
          f"stdout differs for {len(differ)}: {', '.join(differ[:12]) or '-'}")
    raised = [x for x in oracle.stdout.splitlines() if x.startswith("!! ")]
    print(f"programs that raised under python (both runs alike unless listed above): {len(raised)}")
    for x in raised[:20]:
        print("  " + x[:160])

    manifest = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    events = manifest.get("events", {})
    mem = manifest.get("memory", {})
    stats = [d.get("name", "?") for d in mem.get("devices", []) if d.get("stats_by_step")]
    print(f"run: status {manifest.get('status', '?')}, capture {manifest.get('capture', '?')}, "
          f"writer {events.get('writer', {})}, lost rows {events.get('lost_rows', '?')}, "
          f"memory_stats sampled on: {', '.join(stats) or 'none'}")
    audit = subprocess.run([sys.executable, "-m", "jaxplace_cli", "audit", str(run), "--format", "json"],
                           cwd=out, text=True, capture_output=True, timeout=300, env=env)
    findings = []
    if audit.returncode in (0, 1):
        try:
            findings = [(f.get("rule"), f.get("severity")) for f in json.loads(audit.stdout).get("findings", [])]
        except ValueError:
            pass
    print(f"audit: exit {audit.returncode}, {len(findings)} findings: "
          f"{', '.join(sorted({f'{r}/{s}' for r, s in findings})) or '-'}; {audit.stderr.strip()[-300:]}")
    (out / "summary.json").write_text(json.dumps({
        "platform": plat, "devices": what, "guard": guard, "jaxplace": mine, "per_program_guard": per_program,
        "per_file_differs": by_file, "stdout_differs": differ, "raised": raised, "manifest_events": events, "memory_stats_on": stats,
        "audit_exit": audit.returncode, "findings": findings}, indent=1))
    if rec.returncode != oracle.returncode:
        bad.append("exit code")
    if differ:
        bad.append("stdout")
    print(f"accel-check: {'FAIL: ' + ', '.join(bad) if bad else 'PASS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
