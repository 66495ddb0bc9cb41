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
Prints, per kind (h2d, d2h, d2d), the guard's legs and bytes beside jaxplace's (host
callbacks apart: docs/fidelity.md), the files where they differ, the programs whose stdout
differs from the oracle's (guard records removed), the run's capture path and writer, the
audit's findings, and the devices' own memory_stats() by step of a 5-step loop (issue 27).
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
                  r"(?:aval=ShapedArray\((\w+)\[([\d,]*)\]|shape=\(([\d,]*)\), dtype=(\w+))?")
_KIND = {"host-to-device": "h2d", "device-to-host": "d2h", "device-to-device": "d2d"}
# XLA's element types as the guard's device-to-host lines name them
_XLA_BYTES = {"PRED": 1, "S8": 1, "U8": 1, "S16": 2, "U16": 2, "F16": 2, "BF16": 2, "S32": 4, "U32": 4,
              "F32": 4, "S64": 8, "U64": 8, "F64": 8, "C64": 8, "C128": 16}
# One guard record, wherever it fell in the merged stream (it can split a print's output).
_GUARD_RECORD = re.compile(r"[WIEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ guard_lib\.cc:\d+\] [^\n]*\n")
# On an accelerator JAX hands a host callback its operands as arrays on the CPU backend: a
# device_put of host data onto CpuDevice, which the guard logs as host-to-device (a value
# already on a device: device-to-device). jaxplace records a callback as its operands to the
# host and its results back to the accelerator (docs/fidelity.md, "Host callbacks"), so both
# sides' callback legs are counted apart there.
_TO_CPU = re.compile(r"dst_sharding=SingleDeviceSharding\(device=CpuDevice")
# a NamedSharding leg's mesh axes and partition spec: the guard logs the leg with the array's
# global aval, each device receives its shard
_MESH = re.compile(r"dst_sharding=NamedSharding\(mesh=Mesh\(((?:[^()]|\([^()]*\))*)\), spec=P\(((?:[^()]|\([^()]*\))*)\)")
_CALLBACK_API = ("pure_callback", "io_callback", "debug.callback", "debug_print")
STEPS = """import jax, jax.numpy as jnp
x = jnp.zeros((1024, 1024))  # 4 MiB
for step in range(5):
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
        x = x + jnp.ones((1024, 1024)) * step  # a new 4 MiB array a step, the old one freed
print(float(x.sum()))
"""


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


def _is_callback(api: str | None) -> bool:
    return any(c in (api or "") for c in _CALLBACK_API) and "(reads value)" not in (api or "")


def guard_legs(lines: list[str], accelerator: bool = False) -> dict[str, list]:
    """{kind: [legs, bytes, legs of unknown size]} of the guard lines among ``lines``; on an
    accelerator, the legs onto the CPU backend (a callback's operands) under "callback"."""
    import numpy as np

    out = {k: [0, 0, 0] for k in (*KINDS, "callback")}
    for line in lines:
        m = _LEG.search(line)
        if not m:
            continue
        kind = _KIND[m.group(1)]
        row = out["callback" if accelerator and kind != "d2h" and _TO_CPU.search(line) else kind]
        row[0] += 1
        if m.group(2):
            shape = shard_shape([int(d) for d in m.group(3).split(",") if d], line)
            row[1] += int(np.prod(shape, dtype=np.int64)) * np.dtype(m.group(2)).itemsize
        elif m.group(5) in _XLA_BYTES:
            shape = [int(d) for d in m.group(4).split(",") if d]
            row[1] += int(np.prod(shape, dtype=np.int64)) * _XLA_BYTES[m.group(5)]
        else:
            row[2] += 1
    return out


def shard_shape(shape: list[int], line: str) -> list[int]:
    """The shape one device receives of a leg the guard logs with its global aval: each
    dimension divided by the sizes of the mesh axes its spec entry names (``P('x', None)``,
    ``P(('x', 'y'),)``); the shape itself for any other sharding."""
    m = _MESH.search(line)
    if not m:
        return shape
    sizes = {name: int(n) for name, n in re.findall(r"'([^']+)': (\d+)", m.group(1))}
    out = list(shape)
    for i, entry in enumerate(re.findall(r"\([^()]*\)|None|'[^']*'", m.group(2))[:len(out)]):
        for name in re.findall(r"'([^']+)'", entry):
            out[i] //= sizes.get(name, 1)
    return out


def recorded(run: Path, accelerator: bool = False) -> dict[str, list]:
    """{kind: [legs, bytes, legs of unknown size]}; on an accelerator a callback's legs (its
    operands to the host, its results back) under "callback"."""
    out = {k: [0, 0, 0] for k in (*KINDS, "callback")}
    con = sqlite3.connect(run / "events.sqlite")
    try:
        for kind, api, nbytes in con.execute("SELECT kind, api, bytes FROM transfers"):
            row = out["callback" if accelerator and _is_callback(api) else kind]
            row[0] += 1
            if nbytes is None or nbytes < 0:
                row[2] += 1
            else:
                row[1] += nbytes
    finally:
        con.close()
    return out


def per_file(per_program: dict, run: Path, accelerator: bool) -> list:
    """(file, kind, guard (legs, bytes), jaxplace (legs, bytes)) where they differ: the guard's
    legs by the program whose section they fall in, jaxplace's by the innermost frame of their
    call stack that is the program's (the semantics programs print through _show.py, called by
    run_all.py; a program run twice, as training_loop.py, adds up). d2h only on an accelerator
    (the CPU backend logs none); host callbacks apart there (``recorded``)."""
    import collections

    kinds = KINDS if accelerator else ("h2d", "d2d")
    guard: dict = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0, 0]))
    for name, legs in per_program.items():
        f = name.split()[1] if name.startswith(("sample ", "program ")) else f"prog_{name}.py"
        for k in kinds:
            for i in range(3):
                guard[f][k][i] += legs[k][i]
    mine: dict = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    con = sqlite3.connect(run / "events.sqlite")
    try:
        parent = {n: (p, Path(f or "?").name) for n, p, f, *_ in con.execute("SELECT * FROM stacks")}
        node_of = dict(con.execute("SELECT seq, node FROM transfer_stacks"))
        site_file = {i: Path(f or "?").name for i, f, *_ in con.execute("SELECT * FROM sites")}
        for seq, kind, api, nbytes, site in con.execute("SELECT seq, kind, api, bytes, site FROM transfers"):
            if kind not in kinds or (accelerator and _is_callback(api)):
                continue
            files, node = [site_file.get(site, "?")], node_of.get(seq)
            while node:
                node, f = parent.get(node, (0, "?"))
                files.append(f)
            f = next((x for x in files if x not in ("_show.py", "run_all.py")), "?")
            mine[f][kind][0] += 1
            mine[f][kind][1] += max(nbytes or 0, 0)
    finally:
        con.close()
    out = []
    for f in sorted(set(guard) | set(mine)):
        for k in kinds:
            g, m = tuple(guard[f][k]), tuple(mine[f][k])
            if g[0] != m[0] or (g[2] == 0 and g[1] != m[1]):
                out.append((f, k, g[:2], m))
            elif g[2] and g[1] != m[1]:
                print(f"  bytes not compared: {f} {k}: the guard logged {g[2]} of its {g[0]} legs without a size")
    return out


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


def stored_memory(run: Path) -> dict | None:
    """The steps run's `memory_stats` markers in order (bytes in use per device at each step's
    end, then at the run's end) and its buffer and free counts, read from its store: what the
    audit would summarise."""
    try:
        con = sqlite3.connect(f"file:{run / 'events.sqlite'}?mode=ro", uri=True)
        try:
            marks = [json.loads(v) for (v,) in con.execute(
                "SELECT value FROM markers WHERE kind = 'memory_stats' ORDER BY seq")]
            buffers = con.execute("SELECT COUNT(*) FROM buffers").fetchone()[0]
            frees = con.execute("SELECT COUNT(*) FROM frees").fetchone()[0]
        finally:
            con.close()
    except (sqlite3.Error, ValueError):
        return None
    by_step = [{dev: v[0] for dev, v in m.items()} for m in marks if isinstance(m, dict)]
    return {"in_use_by_step": by_step, "buffers": buffers, "frees": frees} if by_step else None


def audit_json(run: Path, env: dict, cwd: Path) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "jaxplace_cli", "audit", str(run), "--format", "json"],
                          cwd=cwd, text=True, capture_output=True, timeout=300, env=env)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        return proc.returncode, {"error": proc.stderr.strip()[-300:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="keep the run and a JSON summary here")
    ap.add_argument("--timeout", type=float, default=280, help="seconds for each run")
    ap.add_argument("--cpu", action="store_true",
                    help="run on the CPU too (to try this script: the CPU backend logs no d2h leg, so d2h is not compared)")
    a = ap.parse_args()
    plat, what = platform()
    if plat == "" or (plat == "cpu" and not a.cpu):
        print(f"accel-check: skipped: no accelerator ({what or 'cpu'})")
        return 0
    accel = plat != "cpu"
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

    stored = (run / "events.sqlite").exists()
    guard = guard_legs(oracle.stdout.splitlines(), accel)
    mine = recorded(run, accel) if stored else {k: [0, 0, 0] for k in (*KINDS, "callback")}
    bad = []
    print(f"{'kind':5} {'guard legs':>11} {'guard bytes':>13} {'size?':>6} {'jaxplace legs':>14} "
          f"{'jaxplace bytes':>15}  result")
    for k in KINDS:
        g, m = guard[k], mine[k]
        if not accel and k == "d2h":
            print(f"{k:5} {'-':>11} {'-':>13} {'-':>6} {m[0]:>14,} {m[1]:>15,}  not compared (CPU)")
            continue
        same = g[0] == m[0] and (g[2] > 0 or g[1] == m[1])
        if not same:
            bad.append(k)
        print(f"{k:5} {g[0]:>11,} {g[1]:>13,} {g[2]:>6,} {m[0]:>14,} {m[1]:>15,}  {'same' if same else 'DIFFERS'}")
    if accel:
        g, m = guard["callback"], mine["callback"]
        print(f"host callbacks, apart (docs/fidelity.md): the guard logs their operands' placement on the CPU "
              f"backend, {g[0]} legs {g[1]:,} B; jaxplace records operands to host and results back, "
              f"{m[0]} legs {m[1]:,} B")
    per_program = {name: guard_legs(lines, accel) for name, lines in sections(oracle.stdout).items()}
    by_file = per_file(per_program, run, accel) if stored else []
    for f, k, g, m in by_file:
        print(f"  differs: {f} {k}: guard {g[0]} legs {g[1]:,} B, jaxplace {m[0]} legs {m[1]:,} B")

    plain = sections(_GUARD_RECORD.sub("", oracle.stdout))
    plain.pop("(before)", None)  # the oracle's stderr before the first program: JAX's own warnings
    mine_out = sections(rec.stdout)
    differ = [name for name, lines in plain.items() if lines != mine_out.get(name)]
    differ += [name for name in mine_out if name not in plain]
    print(f"programs: {len(plain)} under python, {len(mine_out)} under jaxplace; "
          f"stdout differs for {len(differ)}: {', '.join(differ[:12]) or '-'}")
    raised = [x for x in oracle.stdout.splitlines() if x.startswith("!! ")]
    print(f"programs that raised under python (and alike under jaxplace unless listed above): {len(raised)}")
    for x in raised[:20]:
        print("  " + x[:160])

    manifest = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    events = manifest.get("events", {})
    print(f"run: status {manifest.get('status', '?')}, capture {manifest.get('capture', '?')}, "
          f"writer {events.get('writer', {})}, lost rows {events.get('lost_rows', '?')}")
    audit_rc, doc = audit_json(run, env, out)
    findings = sorted({f"{f.get('rule')}/{f.get('severity')}" for f in doc.get("findings", [])})
    print(f"audit: exit {audit_rc}, findings {', '.join(findings) or '-'} {doc.get('error', '')}")

    # device memory (issue 27): the devices' own memory_stats() at the end and at each step's end
    (out / "steps.py").write_text(STEPS)
    steps = _run([sys.executable, "-m", "jaxplace_cli", "run", "-q", "--no-trace", "--out", str(out / "steps"),
                  str(out / "steps.py")], out, env, a.timeout)
    mem = audit_json(out / "steps", env, out)[1].get("memory") or {} if steps.returncode == 0 else {}
    for d in mem.get("devices", []):
        print(f"memory {d['device']}: tracked peak {d['peak_bytes']:,} B (step {d.get('peak_step')}); "
              f"memory_stats at the end {d.get('memory_stats')}; bytes in use by step "
              f"{[x['bytes_in_use'] for x in d.get('stats_by_step', [])]}")
    if not any(d.get("stats_by_step") for d in mem.get("devices", [])):
        stored = stored_memory(out / "steps") if steps.returncode == 0 else None
        if stored:  # the audit did not summarise them (a Python without typer): the store has them
            mem = {"from_store": stored}
            print(f"memory (read from the store; the audit did not run): bytes in use at each step's end, then the run's "
                  f"{stored['in_use_by_step']}; {stored['frees']} of {stored['buffers']} buffers freed")
        else:
            print(f"memory: no memory_stats() by step (steps run exit {steps.returncode}; {steps.stderr.strip()[-200:]})")

    (out / "summary.json").write_text(json.dumps({
        "platform": plat, "devices": what, "guard": guard, "jaxplace": mine, "per_program_guard": per_program,
        "per_file_differs": by_file, "stdout_differs": differ, "raised": raised, "manifest_events": events,
        "audit_exit": audit_rc, "findings": findings, "memory": mem}, indent=1))
    if rec.returncode != oracle.returncode:
        bad.append("exit code")
    if differ:
        bad.append("stdout")
    if by_file:
        bad.append("per file")
    print(f"accel-check: {'FAIL: ' + ', '.join(bad) if bad else 'PASS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
