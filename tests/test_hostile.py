"""A hostile-input corpus (issue 15): run stores, manifests, baselines, budgets, policies and
placement graphs made by an attacker, every one generated here by code.

For every case: the exit code is 0, 1 or 2 (the one it should be), no traceback, no escape
byte (ESC, 0x1b) in stdout or stderr (``--format rich``: only rich's own colour codes), nothing
written anywhere but the output path (each case's workspace is compared file by file, the temp
dir must be left empty), and bounded memory and time: the cases run in two child processes
(one per core) under ``RLIMIT_AS`` = 2 GiB with a 30 s alarm per case, each case through the
same ``cli.main`` as the console script. Then each case is one test of its own.

Traces are sources/'s (tests/test_fuzz*.py). docs/security.md lists the limits tested here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO, child_env

GOLD = REPO / "tests" / "data" / "golden_runs" / "pingpong_eager"
# everything an attacker puts in a text field: terminal escapes (window title, clear screen,
# OSC 8 hyperlink), rich markup that crashes a render or makes a link, Markdown that ends a
# table and forges a verdict, a bidi override, a lone surrogate
PAYLOAD = ("\x1b]0;pwned\x07\x1b[2J\x1b]8;;https://evil.example\x07[/][link=https://evil.example]x[/link]"
           "`|\n**Budget passed**\r\u202e\udc80")
AS_LIMIT = 2 << 30  # bytes of address space per child process
CASE_SECONDS = 30
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colour codes (--format rich only)
DB_PAYLOAD = PAYLOAD.replace("\udc80", "")  # SQLite stores UTF-8: no lone surrogate


# ------------------------------------------------------------------------------ building inputs

def _run(ws: Path, name: str = "run") -> Path:
    dst = ws / name
    shutil.copytree(GOLD, dst)
    return dst


def _sql(run: Path, *statements, args=()) -> None:
    with contextlib.closing(sqlite3.connect(run / "events.sqlite")) as c, c:
        for s in statements:
            c.execute(s, args) if args else c.execute(s)


def _manifest(run: Path, text: str | None = None, **changes) -> None:
    if text is None:
        m = json.loads((run / "run.json").read_text())
        m.update(changes)
        text = json.dumps(m)
    (run / "run.json").write_text(text, errors="surrogatepass")


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)  # no disk, no time: the size check must come before any read
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _devzero(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _hostile_text_run(ws: Path) -> Path:
    """A valid run whose every text field is PAYLOAD: odd, but readable (exit 0)."""
    run = _run(ws)
    p = DB_PAYLOAD
    _sql(run, "UPDATE sites SET file = ?, function = ? WHERE id != 1", args=(f"/tmp/{p}.py", p))
    _sql(run, "UPDATE sites SET file = '/etc/passwd' WHERE id = 1")
    _sql(run, "UPDATE transfers SET api = ?", args=(p,))
    _sql(run, "UPDATE transfers SET src = ? WHERE src = 'cpu:1'", args=(f"cpu:1{p}",))
    _sql(run, "UPDATE transfers SET dst = ? WHERE dst = 'cpu:1'", args=(f"cpu:1{p}",))
    _sql(run, "UPDATE ops SET devices = ? WHERE devices = 'cpu:1'", args=(f"cpu:1{p}",))
    _sql(run, "UPDATE ops SET name = ? WHERE kind = 'method'", args=(p,))
    _sql(run, "INSERT INTO markers VALUES (9999, 0, 'policy-note', ?)", args=(p,))
    m = json.loads((run / "run.json").read_text())
    # cwd and argv[0] name /etc/passwd: SARIF must not anchor a result there
    m.update(argv=["passwd", PAYLOAD], policy=PAYLOAD, host=PAYLOAD, jax_version=PAYLOAD, error=PAYLOAD,
             hooks={"installed": [], "unavailable": [PAYLOAD]}, cwd="/etc")
    m["devices"][1]["name"] = f"cpu:1{p}"
    _manifest(run, json.dumps(m))
    return run


# ------------------------------------------------------------------------------ the cases
# id -> builder(ws) -> (argv, expected exit codes, output path or None, extra checks)
CASES: dict = {}


def case(name, expect=(2,), checks=()):
    def register(builder):
        CASES[name] = (builder, tuple(expect), tuple(checks))
        return builder
    return register


# -- text from the input reaches no terminal, no CI summary, no XML raw ----------------------
for fmt in ("text", "markdown", "github", "junit", "sarif", "json", "rich"):
    case(f"payload in every field, audit -f {fmt}", expect=(0,), checks=(fmt,))(
        lambda ws, fmt=fmt: (["audit", _hostile_text_run(ws), "-f", fmt], None))
for fmt, ext in (("markdown", "md"), ("junit", "xml")):
    case(f"payload in every field, audit -o report.{ext}", expect=(0,), checks=(fmt,))(
        lambda ws, ext=ext: (["audit", _hostile_text_run(ws), "-o", ws / f"report.{ext}"], ws / f"report.{ext}"))


@case("payload, budget breaches in markdown", expect=(1,), checks=("markdown",))
def _(ws):
    (ws / "b.toml").write_text('fail_on = "info"\n[d2d]\ncount = 0\n')
    return ["audit", _hostile_text_run(ws), "--budget", ws / "b.toml", "-f", "markdown"], None


@case("payload, budget breaches in junit", expect=(1,), checks=("junit",))
def _(ws):
    (ws / "b.toml").write_text('fail_on = "info"\n[d2d]\ncount = 0\n')
    return ["audit", _hostile_text_run(ws), "--budget", ws / "b.toml", "-f", "junit"], None


for fmt in ("text", "markdown", "github", "junit"):
    case(f"payload, diff -f {fmt}", expect=(0, 1), checks=(fmt,))(
        lambda ws, fmt=fmt: (["diff", _run(ws, "base"), _hostile_text_run(ws), "-f", fmt,
                              "--fail-on-increase", "0"], None))


@case("payload, suggest", expect=(0,))
def _(ws):
    return ["suggest", _hostile_text_run(ws)], None


@case("newline in argv cannot add rules to suggest -o's policy file", expect=(0,), checks=("rules_file",))
def _(ws):
    run = _run(ws)
    _manifest(run, argv=["x.py", 'a\n[[rule]]\nop = "*"\ndevice = "cpu:9"\n#', "\r[default]\rdevice = 'cpu:8'"])
    return ["suggest", run, "-o", ws / "policy.toml"], ws / "policy.toml"


@case("error line quoting input stays one line", expect=(2,), checks=("one_line",))
def _(ws):
    (ws / "b.toml").write_text(json.dumps(PAYLOAD.replace("\udc80", "")) + " = 1\n")
    return ["audit", _run(ws), "--budget", ws / "b.toml"], None


@case("error line quoting a path with escapes", expect=(2,), checks=("one_line",))
def _(ws):
    return ["audit", ws / "run\x1b[2J\x1b]0;t\x07"], None


# -- manifests: every field of the wrong type, generated from the dataclass ------------------
def _wrong_value(hint: str):
    if "list" in hint:
        return {"not": "a list"}
    if hint.startswith(("Target", "Hooks", "Events", "Trace", "Placement")):
        return ["not", "an object"]
    if "bool" in hint:
        return "yes"
    if "int" in hint or "float" in hint:
        return "12"
    return 12


def _manifest_fields():
    from jaxplace_cli.model.manifest import Manifest

    return [(f.name, str(f.type)) for f in dataclasses.fields(Manifest)]


for _name, _hint in _manifest_fields():
    case(f"run.json field {_name} of the wrong type", checks=("one_line", "run.json", _name))(
        lambda ws, n=_name, h=_hint: (["audit", _run_with(ws, **{n: _wrong_value(h)})], None))


def _run_with(ws, **changes):
    run = _run(ws)
    _manifest(run, **changes)
    return run


for _label, _changes, _field in [
    ("devices[0].name is a number", {"devices": [{"name": 5}]}, "devices[0].name"),
    ("events.ops negative", {"events": {"ops": -1}}, "events.ops"),
    ("events.lost_rows 31 digits", {"events": {"lost_rows": 10**30}}, "31 digits"),
    ("events.ops 2**63", {"events": {"ops": 2**63}}, "events.ops"),
    ("simulated_devices 0", {"simulated_devices": 0}, "simulated_devices"),
    ("status unknown", {"status": "pwned"}, "status"),
    ("trace.seconds a list", {"trace": {"seconds": [1]}}, "trace.seconds"),
    ("placement.decisions a float", {"placement": {"decisions": 1.5}}, "placement.decisions"),
]:
    case(f"run.json {_label}", checks=("one_line", "run.json", _field))(
        lambda ws, c=_changes: (["audit", _run_with(ws, **c)], None))


@case("run.json without status", checks=("one_line", "status"))
def _(ws):
    run = _run(ws)
    m = json.loads((run / "run.json").read_text())
    del m["status"]
    _manifest(run, json.dumps(m))
    return ["audit", run], None


for _label, _text in [
    ("nested 100k deep", '{"schema_version": 1, "status": "complete", "argv": ' + _deep(100_000) + "}"),
    ("a list nested 100k deep", _deep(100_000)),
    ("exit_code NaN", '{"schema_version": 1, "status": "complete", "exit_code": NaN}'),
    ("exit_code 1e999", '{"schema_version": 1, "status": "complete", "exit_code": 1e999}'),
    ("exit_code of 5,000 digits", '{"schema_version": 1, "status": "complete", "exit_code": ' + "9" * 5000 + "}"),
    ("not UTF-8", None),
]:
    case(f"run.json {_label}", checks=("one_line", "run.json"))(
        lambda ws, t=_text: (["audit", _raw_manifest(ws, t)], None))


def _raw_manifest(ws, text):
    run = _run(ws)
    if text is None:
        (run / "run.json").write_bytes(b'{"schema_version": 1, "status": "\xff\xfe"}')
    else:
        (run / "run.json").write_text(text)
    return run


for _label, _make in [("a symlink to /dev/zero", _devzero), ("a FIFO", _fifo),
                      ("17 MiB", lambda p: _sparse(p, 17 << 20))]:
    case(f"run.json is {_label}", checks=("one_line",))(
        lambda ws, mk=_make: (["audit", _special_manifest(ws, mk)], None))


def _special_manifest(ws, make):
    run = _run(ws)
    (run / "run.json").unlink()
    make(run / "run.json")
    return run


# -- stores -------------------------------------------------------------------------------
for _label, _stmt, _expect in [
    ("in_bufs not numbers", "UPDATE ops SET in_bufs = 'abc,1' WHERE seq = 7", (2,)),
    ("in_bufs 5,000 digits", "UPDATE ops SET in_bufs = '" + "9" * 5000 + "' WHERE seq = 7", (2,)),
    ("out_bufs not numbers", "UPDATE ops SET out_bufs = '1;DROP TABLE ops' WHERE seq = 3", (2,)),
    ("negative dispatch times", "UPDATE ops SET dur_ns = -5000000", (2,)),
    ("compile marker nested 100k deep", "UPDATE markers SET value = '" + _deep(100_000) + "'", (2,)),
    ("compile marker not JSON", "UPDATE markers SET value = '{\"fun\": '", (2,)),
    ("compile marker a list", "UPDATE markers SET value = '[1, 2]'", (2,)),
    ("compile marker of wrong types", "UPDATE markers SET value = "
     "'{\"fun\": [1], \"secs\": \"NaN\", \"op_seq\": \"7\", \"signature\": {\"a\": 1}}'", (2,)),
    ("compile marker secs 1e999", "UPDATE markers SET value = '{\"fun\": \"jit(multiply)\", \"secs\": 1e999, "
     "\"op_seq\": 7, \"signature\": []}'", (2,)),
    ("compile marker without fields", "UPDATE markers SET value = '{}'", (0,)),
]:
    for _cmd in ("audit", "suggest"):
        case(f"{_cmd} store: {_label}", expect=_expect,
             checks=("one_line",) if _expect == (2,) else ())(
            lambda ws, s=_stmt, c=_cmd: ([c, _store_with(ws, s)], None))


def _store_with(ws, statement):
    run = _run(ws)
    _sql(run, statement)
    return run


@case("store: d2d between 2,000 distinct devices", checks=("one_line", "devices"))
def _(ws):
    run = _run(ws)
    rows = [(100 + 2 * i, 0, 0, "d2d", f"dev:{i}", f"dev:{i + 1}", 4096, 0, 0, "jax.device_put", 3, 1000 + i,
             101 + 2 * i) for i in range(2000)]
    with contextlib.closing(sqlite3.connect(run / "events.sqlite")) as c, c:
        c.executemany("INSERT INTO transfers VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    return ["audit", run], None


def _in_wal(run: Path, statement: str) -> None:
    """``statement`` committed into the store's -wal by a process that dies before any
    checkpoint (a killed run), and the -shm it leaves removed."""
    code = ("import os, sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('PRAGMA journal_mode=WAL')\n"
            "c.execute(sys.argv[2])\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(run / "events.sqlite"), statement], check=True)
    (run / "events.sqlite-shm").unlink(missing_ok=True)
    assert (run / "events.sqlite-wal").stat().st_size > 0


@case("store: a killed run's WAL, no -shm: audited from a copy", expect=(0,), checks=("no_shm",))
def _(ws):
    run = _run(ws)
    _in_wal(run, "INSERT INTO markers VALUES (9998, 0, 'policy-note', 'from the wal')")
    return ["audit", run], None


# -- baselines (diff BASE RUN) ------------------------------------------------------------
def _baseline(ws, mutate=None, text=None) -> Path:
    from jaxplace_cli.analysis.diff import load_side

    path = ws / "base.json"
    if text is None:
        doc = load_side(GOLD, 1024)
        mutate(doc)
        text = json.dumps(doc)
    path.write_text(text)
    return path


def _set(path, value):
    def mutate(doc):
        *head, last = path
        d = doc
        for k in head:
            d = d[k]
        if value is KeyError:
            del d[last]
        else:
            d[last] = value
    return mutate


for _label, _mutate, _text, _field in [
    ("without totals", _set(("transfers", "totals"), KeyError), None, "transfers.totals"),
    ("totals a list", _set(("transfers", "totals"), []), None, "transfers.totals"),
    ("a count that is text", _set(("transfers", "totals", "d2d", "count"), "9"), None, "d2d.count"),
    ("a negative byte count", _set(("transfers", "totals", "d2d", "bytes"), -1), None, "d2d.bytes"),
    ("a 25-digit byte count", _set(("transfers", "totals", "d2d", "bytes"), 10**24), None, "25 digits"),
    ("a byte count of 10**19", _set(("transfers", "totals", "d2d", "bytes"), 10**19), None, "d2d.bytes"),
    ("a site without file", _set(("transfers", "sites", 0, "file"), KeyError), None, "file"),
    ("a site line of text", _set(("transfers", "sites", 0, "line"), "25"), None, "line"),
    ("NaN totals", None, '{"schema_version": 1, "transfers": {"totals": {"d2d": {"count": NaN, "bytes": NaN}},'
     ' "sites": []}}', "NaN"),
    ("Infinity bytes", None, '{"schema_version": 1, "transfers": {"totals": {"d2d": {"count": 1, '
     '"bytes": 1e999}}, "sites": []}}', "1e999"),
    ("nested 100k deep", None, '{"schema_version": 1, "transfers": ' + _deep(100_000) + "}", "nested"),
    ("an integer of 5,000 digits", None, '{"schema_version": 1, "transfers": {"min_bytes": '
     + "9" * 5000 + "}}", "digits"),
]:
    case(f"diff baseline {_label}", checks=("one_line", "base.json", _field))(
        lambda ws, m=_mutate, t=_text: (["diff", _baseline(ws, m, t), _run(ws), "--fail-on-increase", "0"], None))

for _label, _make in [("a symlink to /dev/zero", _devzero), ("a FIFO", _fifo),
                      ("300 MiB", lambda p: _sparse(p, 300 << 20))]:
    case(f"diff baseline is {_label}", checks=("one_line",))(
        lambda ws, mk=_make: (["diff", mk(ws / "base.json"), _run(ws)], None))


# -- budgets (audit --budget) and policies (run --policy) ---------------------------------
_TOML = [
    ("a symlink to /dev/zero", _devzero),
    ("a FIFO", _fifo),
    ("a directory", lambda p: (p.mkdir(), p)[1]),
    ("2 MiB", lambda p: _sparse(p, 2 << 20)),
    ("not UTF-8", lambda p: (p.write_bytes(b'pingpong = "\xff"\n'), p)[1]),
    ("nested 100k deep", lambda p: (p.write_text("x = " + _deep(100_000) + "\n"), p)[1]),
]
for _label, _make in _TOML + [
    ("an integer of 5,000 digits", lambda p: (p.write_text("pingpong = " + "9" * 5000 + "\n"), p)[1]),
    ("an integer of 4,000 digits", lambda p: (p.write_text("pingpong = " + "9" * 4000 + "\n"), p)[1]),
    ("a NaN limit", lambda p: (p.write_text("min_bytes = nan\n"), p)[1]),
]:
    case(f"budget is {_label}", checks=("one_line", "budget"))(
        lambda ws, mk=_make: (["audit", _run(ws), "--budget", mk(ws / "budget.toml")], None))

for _label, _make in _TOML + [
    ("a site line of 5,000 digits", lambda p: (p.write_text(
        '[[rule]]\nsite = "x.py:' + "9" * 5000 + '"\ndevice = "cpu:0"\n'), p)[1]),
    ("an occurrence of 5,000 digits", lambda p: (p.write_text(
        "[[rule]]\noccurrence = " + "9" * 5000 + '\ndevice = "cpu:0"\n'), p)[1]),
]:
    case(f"policy file is {_label}", checks=("one_line", "policy", "not_run"))(
        lambda ws, mk=_make: (["run", "--out", ws / "never", "--policy", mk(ws / "policy.toml"),
                               _marker_script(ws)], None))


def _marker_script(ws) -> Path:
    (ws / "script.py").write_text(f"open({str(ws / 'RAN')!r}, 'w').close()\n")
    return ws / "script.py"


# -- suggest --graph ----------------------------------------------------------------------
def _graph(**changes) -> str:
    g = {"maxFPGAs": 2, "maxCPUs": 1, "nodes": [{"id": 1, "fpgaLatency": 1.0, "cpuLatency": 2.0, "size": 1},
                                                 {"id": 2, "fpgaLatency": 1.0, "cpuLatency": 2.0, "size": 1}],
         "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5, "size": 100}]}
    g.update(changes)
    return json.dumps(g)


for _label, _text in [
    ("nested 100k deep", '{"nodes": ' + _deep(100_000) + ', "edges": []}'),
    ("a NaN latency", _graph().replace('"fpgaLatency": 1.0', '"fpgaLatency": NaN', 1)),
    ("a latency of 1e400 as text", _graph().replace('"fpgaLatency": 1.0', '"fpgaLatency": "1e400"', 1)),
    ("a trillion accelerators", _graph(maxFPGAs=10**12)),
    ("maxFPGAs text", _graph(maxFPGAs="x")),
    ("nodes an object", _graph(nodes={})),
    ("an edge to a missing node", _graph(edges=[{"sourceId": 1, "destId": 99}])),
    ("a cycle", _graph(edges=[{"sourceId": 1, "destId": 2}, {"sourceId": 2, "destId": 1}])),
    ("an id of 5,000 digits", _graph().replace('"id": 1,', '"id": ' + "9" * 5000 + ",", 1)),
]:
    case(f"suggest --graph {_label}", checks=("one_line", "g.json"))(
        lambda ws, t=_text: (["suggest", "--graph", _write(ws / "g.json", t)], None))

for _label, _make in [("a symlink to /dev/zero", _devzero), ("a FIFO", _fifo),
                      ("65 MiB", lambda p: _sparse(p, 65 << 20))]:
    case(f"suggest --graph is {_label}", checks=("one_line", "g.json"))(
        lambda ws, mk=_make: (["suggest", "--graph", mk(ws / "g.json")], None))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ running them

CHILD = r"""
import contextlib, io, json, os, resource, signal, sys, traceback
limit, seconds = int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

timed_out = []

def alarm(signum, frame):
    timed_out.append(True)
    raise TimeoutError(f"case still running after {seconds} s")

signal.signal(signal.SIGALRM, alarm)
from jaxplace_cli.cli.main import main

results = {}
for cid, argv, cwd in json.loads(open(sys.argv[1]).read()):
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    timed_out.clear()
    signal.alarm(seconds)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            code = "escaped"
            traceback.print_exc(file=err)
    signal.alarm(0)
    results[cid] = {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "timed_out": bool(timed_out)}
json.dump(results, open(sys.argv[1] + ".out", "w"))
"""


def _snapshot(root: Path) -> dict:
    """path -> (type, size, mtime) of everything under root, symlinks and FIFOs not followed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_mode >> 12, st.st_size if not os.path.isdir(p) else 0,
                                             st.st_mtime_ns if os.path.isfile(p) and not os.path.islink(p) else 0)
    return out


def _batch(cases: list, tmp: Path, n: int) -> dict:
    spec = tmp / f"batch{n}.json"
    spec.write_text(json.dumps(cases))
    tmpdir = tmp / f"tmpdir{n}"
    tmpdir.mkdir()
    env = child_env(TMPDIR=str(tmpdir), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(spec), str(AS_LIMIT), str(CASE_SECONDS)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(Path(str(spec) + ".out").read_text())
    left = sorted(os.listdir(tmpdir))
    for r in results.values():
        r["tmp_left"] = left  # temp files of any case of the batch: none may be left
    return results


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    built, batches = {}, [[], []]
    for i, (cid, (builder, expect, checks)) in enumerate(CASES.items()):
        ws = tmp / f"case{i:03d}"
        ws.mkdir()
        argv, out = builder(ws)
        built[cid] = {"ws": ws, "out": out, "before": _snapshot(ws), "expect": expect, "checks": checks}
        batches[i % 2].append((cid, [os.fsdecode(a) for a in argv], str(ws)))
    with ThreadPoolExecutor(2) as pool:
        results = {}
        for r in pool.map(lambda nb: _batch(nb[1], tmp, nb[0]), enumerate(batches)):
            results.update(r)
    for cid, b in built.items():
        b.update(results[cid], after=_snapshot(b["ws"]))
    return built


@pytest.mark.parametrize("cid", list(CASES))
def test_hostile_input(corpus, cid):
    r = corpus[cid]
    out, err = r["stdout"], r["stderr"]
    assert not r["timed_out"], f"still running after {CASE_SECONDS} s (a FIFO read? a quadratic loop?)"
    assert r["code"] in r["expect"], f"exit {r['code']}, expected {r['expect']}:\n{err[-2000:]}"
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    assert "\x1b" not in err, err
    assert "\x1b" not in (SGR.sub("", out) if "rich" in r["checks"] else out), out[-2000:]
    # nothing written but the output path, nothing changed in the input, no temp file left
    out_rel = os.path.relpath(r["out"], r["ws"]) if r["out"] else None
    after = {k: v for k, v in r["after"].items() if k != out_rel}
    assert after == r["before"], sorted(set(after.items()) ^ set(r["before"].items()))
    assert r["tmp_left"] == []
    for check in r["checks"]:
        _CHECKS.get(check, _mentions)(r, out, err, check)


def _mentions(r, out, err, word):
    assert word in err, f"{word!r} not named in: {err}"


def _one_line(r, out, err, _):
    assert err.startswith("jaxplace: error: ") and err.count("\n") == 1, err


def _markdown(r, out, err, _):
    text = Path(r["out"]).read_text() if r["out"] else out
    assert "\n**Budget passed" not in text and "\n| **Budget" not in text
    assert "\r" not in text and "\u202e" not in text
    tables = [ln for ln in text.splitlines() if ln.startswith("|")]
    # every row of a table has as many cells as its header: nothing broke out of a cell
    for ln in tables:
        assert len(re.findall(r"(?<!\\)\|", ln)) in (5, 7), ln


def _junit(r, out, err, _):
    text = Path(r["out"]).read_text() if r["out"] else out
    ET.fromstring(text.encode())  # well-formed XML


def _sarif(r, out, err, _):
    doc = json.loads(out)
    uris = [loc["physicalLocation"]["artifactLocation"]["uri"] for res in doc["runs"][0]["results"]
            for loc in res["locations"]]
    # only paths below the cwd (the case's workspace) become URIs, relative ones
    assert uris and all(not u.startswith(("file:", "/", "..")) and "passwd" not in u for u in uris), uris


def _policy(r, out, err, _):
    text = Path(r["out"]).read_text()
    doc = tomllib.loads(text)  # still a valid rules file
    assert all("cpu:9" not in str(rule) for rule in doc.get("rule", [])), doc
    assert doc["default"]["device"] != "cpu:8"
    assert all(ln.startswith("#") for ln in text.splitlines() if "cpu:9" in ln or "cpu:8" in ln)


def _no_shm(r, out, err, _):
    assert not (r["ws"] / "run" / "events.sqlite-shm").exists()
    assert "from the wal" in out  # the WAL's data was read


def _not_run(r, out, err, _):
    assert not (r["ws"] / "RAN").exists() and not (r["ws"] / "never").exists()


_CHECKS = {"one_line": _one_line, "markdown": _markdown, "junit": _junit, "sarif": _sarif,
           "rules_file": _policy, "no_shm": _no_shm, "not_run": _not_run,
           **{k: lambda *a: None for k in ("text", "github", "json", "rich")}}


# ------------------------------------------------------------------------------ renderers, by hypothesis
# The renderers are pure functions of an AuditResult / Diff / policy: hypothesis puts generated
# text (escape sequences, markup, Markdown, XML-illegal characters, surrogates among random
# Unicode) into every string field they print, in-process, and checks each output format.

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FRAGMENTS = ["\x1b[2J", "\x1b]0;t\x07", "\x1b]8;;http://x\x07", "[/]", "[link=http://x]", "[bold]", "`", "``",
             "|", "\n", "\r\n", "\u2028", "\u202e", "\u200b", "<script>", "&#27;", "]]>", "\x00", "\x0c",
             "\udc80", ":smile:", "**Budget passed**", "%0A", "::error::", "# ", "\\"]
HOSTILE_TEXT = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(exclude_categories=()),
                                                                      max_size=6)),
                        max_size=6).map("".join)


@pytest.fixture(scope="module")
def clean_result():
    from jaxplace_cli.analysis import audit_run
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.run import open_run

    run = open_run(GOLD)
    try:
        return audit_run(run, RuleConfig())
    finally:
        run.store.close()


def _inject(result, s: str):
    import copy

    from jaxplace_cli.analysis import BudgetVerdict
    from jaxplace_cli.analysis.budgets import Breach

    r = copy.deepcopy(result)
    r.path = f"runs/{s}"
    r.manifest.argv = ["x.py", s]
    r.manifest.policy = s
    r.notes.append(s)
    r.summary.devices.append(s)
    r.summary.sites = [dataclasses.replace(t, file=f"/w/{s}.py", api=s, kind=s, routes=[s]) for t in r.summary.sites]
    r.findings = [dataclasses.replace(f, message=s, file=f"{s}.py", fix=s,
                                      related=[{"file": s, "line": 1, "role": s}]) for f in r.findings]
    r.budget = BudgetVerdict(s, [s], [Breach("d2d.count", 0, 1, s, f"{s}.py", 3)])
    return r


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(s=HOSTILE_TEXT)
def test_every_audit_format_keeps_input_inert(clean_result, s):
    from jaxplace_cli.report import FORMATS, render_to_string

    result = _inject(clean_result, s)
    for fmt in FORMATS:
        if fmt == "html":  # reads the run's store itself: tests/test_report_html.py feeds it hostile text
            continue
        text = render_to_string(result, fmt)
        shown = SGR.sub("", text) if fmt == "rich" else text
        m = re.search("[\x00-\x08\x0b-\x1f\x7f\u202e\u2028\ud800-\udfff]", shown)
        assert not m, (fmt, repr(shown[max(m.start() - 80, 0):m.start() + 40]) if m else "")
        if fmt == "markdown":
            _markdown({"out": None}, text, "", fmt)
        elif fmt == "junit":
            ET.fromstring(text.encode())
        elif fmt in ("sarif", "json"):
            json.loads(text)
        elif fmt == "github":
            assert all(ln.startswith(("::error", "::warning", "::notice")) for ln in text.splitlines())


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(s=HOSTILE_TEXT, t=HOSTILE_TEXT)
def test_every_diff_format_keeps_input_inert(s, t):
    from jaxplace_cli.analysis.diff import Diff, KindDelta, SiteDelta
    from jaxplace_cli.report.base import Options, formats, renderer

    d = Diff(s, t, [KindDelta("d2d", 1, 3, 10, 30)],
             [SiteDelta(f"{s}.py:3 d2d {t}", 1, 3, 10, 30, "changed", f"{s}.py", 3),
              SiteDelta(t, 0, 1, 0, 5, "new", t, 1)], [s])
    for fmt in formats("diff"):
        text = renderer("diff", fmt).render(d, Options(failures=(f"d2d bytes grew {s}",)))
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202e\u2028\ud800-\udfff]", text), (fmt, text)
        if fmt == "markdown":
            _markdown({"out": None}, text, "", fmt)
        elif fmt == "junit":
            ET.fromstring(text.encode())


@settings(max_examples=60, deadline=None)
@given(header=st.lists(HOSTILE_TEXT, max_size=4))
def test_policy_file_header_stays_comments(header):
    """suggest -o: whatever the header quotes (the run's argv), the file holds the rules given."""
    from jaxplace_cli.suggest.policy_file import render_policy

    rules = [{"site": "a.py:3", "op": ["add"], "device": "cpu:1"}]
    doc = tomllib.loads(render_policy("cpu:0", rules, header))
    assert doc == {"version": 1, "rule": rules, "default": {"device": "cpu:0"}}


def test_pingpong_memory_grows_linearly(tmp_path):
    """One array bounced n times between two devices (rows written directly, no JAX): the
    rule's peak memory for 4n bounces stays about 4x that for n (it was 16x: every moved
    buffer kept a copy of the whole history), and the returns are exact: every move
    but the first returns to a device the data had left."""
    import tracemalloc

    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.rules.pingpong import pingpong
    from jaxplace_cli.analysis.run import open_run
    from jaxplace_cli.model.events import OpEvent, Site, TransferEvent
    from jaxplace_cli.model.manifest import Manifest
    from jaxplace_cli.store.layout import write_manifest
    from jaxplace_cli.store.writer import StoreWriter

    def bounced(n: int) -> Path:
        d = tmp_path / f"b{n}"
        d.mkdir()
        write_manifest(d, Manifest(status="complete"))
        ops, xfers = [], []
        for i in range(1, n + 1):  # buffer i moved from the device of i-1 to the other
            src, dst = f"cpu:{(i + 1) % 2}", f"cpu:{i % 2}"
            ops.append(OpEvent(2 * i, 0, 1, 0, "device_put", "device_put", dst, 1, str(i - 1 if i > 1 else 0),
                               str(i), "", False, ""))
            if i > 1:
                xfers.append(TransferEvent(2 * i + 1, 0, 0, "d2d", src, dst, 4096, False, False,
                                           "jax.device_put", 1, i, 2 * i))
        w = StoreWriter(d / "events.sqlite")
        w.write({"sites": [Site(1, "/w/b.py", 3, "main")], "ops": ops, "transfers": xfers})
        w.close()
        return d

    peaks, found = [], []
    for n in (2000, 8000):
        run = open_run(bounced(n))
        tracemalloc.start()
        (f,) = pingpong(run, RuleConfig())
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        run.store.close()
        found.append(f.count)
    assert found == [2000 - 2, 8000 - 2]  # n - 1 moves, all but the first return
    assert peaks[1] < 6 * peaks[0], peaks


def _depth(value) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                                         max_size=4),
                           max_leaves=40)


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES, at_least=st.sampled_from([0, 1, 3, 64]))
def test_json_depth_is_exact(value, at_least):
    """The bracket count that guards every JSON reader (model/untrusted.py) is exact, whatever
    brackets, quotes and backslashes the strings hold, however many levels it peels first."""
    from jaxplace_cli.model.untrusted import json_depth

    assert json_depth(json.dumps(value), at_least) == _depth(value)
    assert json_depth(json.dumps(value, indent=1), at_least) == _depth(value)


def test_manifest_round_trip_and_field_errors():
    """What the session writes reads back equal; a field of the wrong type anywhere is named."""
    from jaxplace_cli.model.manifest import Device, Events, Manifest, ManifestError, Placement, Trace, Writer

    m = Manifest(status="complete", argv=["t.py", "--x"], exit_code=0, devices=[Device("cpu:0", "cpu", 0, "cpu")],
                 events=Events(3, 2, 0, "", Writer("process", 12, 3400)), trace=Trace("window", "closed", 2.5, 100, 7),
                 placement=Placement("rr", 5, 0, "unit", "raise", ["cpu:0", "cpu:1"]), follow_children=True)
    assert Manifest.from_dict(json.loads(json.dumps(m.to_dict())), "run.json") == m
    assert "pid" not in Manifest(status="complete").to_dict()["events"]["writer"]  # a thread writer
    d = m.to_dict()
    d["placement"]["devices"][1] = 7
    with pytest.raises(ManifestError, match=r"'placement.devices\[1\]' must be a string, not the number 7"):
        Manifest.from_dict(d, "run.json")
