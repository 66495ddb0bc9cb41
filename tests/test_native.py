"""Issue 18: the native capture hot path (capture/_native.c) and its pure-Python twin.

Both paths must append the same rows: a few sample scripts, chosen for the paths they take
(below), are recorded twice, once per path, and the two stores (time columns aside) and the two
``audit --format json`` reports (timings aside) must be equal. The twin is checked call by call
in-process (issue 23); these end-to-end runs keep the whole `jaxplace run` honest. A build
without the extension must still run, and say ``capture: python``.
"""
from __future__ import annotations

import collections
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli

REPO = Path(__file__).resolve().parents[1]
# script -> --devices (the dogfood's, so the native recording is the session's shared one):
# eager d2d ping-pong; numpy uploads and float() host syncs in a jitted loop; vjp residuals
# moved by device_put; in-code device_placement over conv, sort, cumsum and device_get
PATHS_TAKEN = {"pingpong_eager": 2, "mlp_host_sync": 1, "fwd_bwd_split": 2, "article_hetero_placement": 3}
JAXPLACE = [sys.executable, "-m", "jaxplace_cli"]
TIME_COLUMNS = {"ts_ns", "dur_ns", "thread"}

pytestmark = pytest.mark.slow


def _can_build() -> bool:
    """A C compiler and the Python headers: where `pip install` must have built the extensions."""
    import shutil
    import sysconfig

    cc = (os.environ.get("CC") or "cc").split()[0]
    return bool(shutil.which(cc)) and Path(sysconfig.get_paths()["include"], "Python.h").is_file()


def _built() -> bool:
    try:
        from jaxplace_cli.capture import _native  # noqa: F401
        from jaxplace_cli.model import _packed  # noqa: F401
    except ImportError:
        return False
    return True


# Where no compiler exists the extensions cannot be there, and the tests that need them say so;
# where one exists they must have been built (a silently failed build would make every
# comparison here Python against Python).
needs_native = pytest.mark.skipif(not _built() and not _can_build(),
                                  reason="no C compiler or Python headers: the native path is not built here")


def _env(capture: str | None, **extra) -> dict:
    env = dict(os.environ)
    env.pop("JAXPLACE_CAPTURE", None)
    if capture:
        env["JAXPLACE_CAPTURE"] = capture
    env.update(extra)
    return env


def _record(tmp_path: Path, script: str, capture: str | None, name: str, **extra) -> Path:
    out = tmp_path / name / "run"  # the same directory name: it shows in generated policy text
    r = subprocess.run([*JAXPLACE, "run", "--devices", "2", "--trace", "off", "--out", str(out),
                        str(REPO / "sample_scripts" / script)],
                       cwd=REPO / "sample_scripts", env=_env(capture, **extra), capture_output=True,
                       text=True, timeout=240)
    assert (out / "run.json").exists(), r.stderr[-2000:]
    return out


def _rows(run: Path) -> dict[str, list]:
    """Every stored row, time columns dropped, in sequence order."""
    c = sqlite3.connect(run / "events.sqlite")
    try:
        out = {}
        for table in ("sites", "ops", "transfers", "buffers", "frees"):  # frees: the watches (issue 27)
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})")]
            keep = [col for col in cols if col not in TIME_COLUMNS]
            order = {"sites": "id", "buffers": "buf", "frees": "buf, seq"}.get(table, "seq")
            out[table] = c.execute(f"SELECT {', '.join(keep)} FROM {table} ORDER BY {order}").fetchall()
        return out
    finally:
        c.close()


def _without_timings(obj):
    """An audit report with what depends on the clock removed (dispatch times, run paths)."""
    if isinstance(obj, dict):
        return {k: _without_timings(v) for k, v in obj.items()
                if not (k.endswith("_ns") or k.endswith("_s") or k in ("path", "trace"))}
    if isinstance(obj, list):
        return [_without_timings(v) for v in obj]
    if isinstance(obj, str):  # "compiled 4 times (0.26 s compiling)"
        return re.sub(r"\d+(\.\d+)? ?(s|ms|us|µs|ns)\b", "<time>", obj)
    return obj


def _audit(run: Path) -> dict:
    r = cli("audit", run, "--format", "json")
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return _without_timings(json.loads(r.stdout))


@needs_native
def test_the_extension_is_built_here():
    """`make test` installs with a C compiler present, so the native path must be there: a
    silently missing build would make every other test here compare Python with Python."""
    import importlib

    importlib.import_module("jaxplace_cli.capture._native")  # ImportError: not built
    importlib.import_module("jaxplace_cli.model._packed")
    importlib.import_module("jaxplace_cli.capture._wrap")  # Python's headers only, as the two above


def test_each_extension_built_in_this_tree_is_newer_than_its_sources():
    """The extensions are ``optional`` (pyproject.toml): a C file that no longer compiles
    installs without its module, and in a working tree that built it before, the old ``.so``
    stays beside the new source — every test then runs the previous C (noticed twice while
    editing `_native.c`). `make install` rebuilds when a source changes; a ``.so`` older than
    any of its ``sources`` or ``depends`` is that rebuild having failed. (`_sqlite` needs
    ``sqlite3.h``: where it is not built at all there is nothing to compare.)"""
    import importlib.util
    import tomllib

    exts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["ext-modules"]
    assert {e["name"] for e in exts} >= {"jaxplace_cli.capture._native", "jaxplace_cli.model._packed"}
    stale = []
    for ext in exts:
        spec = importlib.util.find_spec(ext["name"])
        if spec is None or not spec.origin:
            continue  # not built: test_the_extension_is_built_here says so for the required ones
        built = Path(spec.origin).resolve()
        if REPO not in built.parents:
            continue  # a build installed elsewhere (a wheel), not this tree's in-place one
        inputs = [REPO / p for p in [*ext["sources"], *ext.get("depends", [])]]
        newest = max(inputs, key=lambda p: p.stat().st_mtime)
        if built.stat().st_mtime < newest.stat().st_mtime:
            stale.append(f"{built.relative_to(REPO)} is older than {newest.relative_to(REPO)}")
    assert not stale, ("stale C build (its compile failed, or nothing rebuilt it): "
                       + "; ".join(stale) + " — run `make install` and read the compiler's errors")


@needs_native
@pytest.mark.parametrize("script", sorted(PATHS_TAKEN))
def test_native_and_python_paths_record_the_same_rows(sample_run, script):
    native = sample_run(script, devices=PATHS_TAKEN[script], capture="native").run
    python = sample_run(script, devices=PATHS_TAKEN[script], capture="python").run
    assert json.loads((native / "run.json").read_text())["capture"] == "native"
    assert json.loads((python / "run.json").read_text())["capture"] == "python"
    a, b = _rows(native), _rows(python)
    for table in a:
        assert a[table] == b[table], f"{script}: table {table} differs between the paths"
    assert _audit(native) == _audit(python)


@needs_native
def test_a_failed_extension_import_falls_back_to_python(tmp_path, sample_run):
    """A build without a compiler has no _native module: simulated by a meta-path finder that
    makes its import fail. The run works, records the same events, and says capture: python."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoNative:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'jaxplace_cli.capture._native':\n"
        "            raise ImportError('simulated: built without a C compiler')\n"
        "sys.meta_path.insert(0, _NoNative())\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH", "")]))}
    broken = _record(tmp_path, "pingpong_eager.py", None, "broken", **env)
    manifest = json.loads((broken / "run.json").read_text())
    assert manifest["capture"] == "python"
    assert manifest["status"] == "complete"
    native = sample_run("pingpong_eager", devices=2, capture="native").run
    assert _rows(broken) == _rows(native)
    # pingpong_eager.py: 9 device_put + 5 multiply = 14 ops (hand count in test_golden_runs' case)
    assert len(_rows(broken)["ops"]) == 14


def test_a_build_without_a_compiler_installs_and_runs_on_python(tmp_path):
    """`pip wheel` with CC=/bin/false: the two extensions fail to build (optional = true in
    pyproject.toml), the wheel is still made, holds no compiled module, and jaxplace from it
    records a run that says capture: python."""
    import zipfile

    wheels = tmp_path / "wheels"
    env = _env(None, CC="/bin/false", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = wheels.glob("jaxplace-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        assert not [n for n in z.namelist() if n.endswith((".so", ".pyd"))]
        z.extractall(site)
    out = tmp_path / "run"
    env = _env(None, PYTHONPATH=str(site))  # ahead of the editable install of this checkout
    r = subprocess.run([sys.executable, "-m", "jaxplace_cli", "run", "--devices", "2", "--trace", "off",
                        "--out", str(out), str(REPO / "sample_scripts" / "pingpong_eager.py")],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)  # not the checkout
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "run.json").read_text())["capture"] == "python"
    assert len(_rows(out)["ops"]) == 14


BACKPRESSURE_SCRIPT = """
import jax.numpy as jnp
x = jnp.ones((4,), jnp.float32)
for i in range(6000):
    x = x * 0.5
    x = x + 0.25
x.block_until_ready()
"""


@pytest.mark.parametrize("capture", [None, "python"])
def test_back_pressure_slows_the_script_and_loses_nothing(tmp_path, capture):
    """With a backlog limit of 200 rows, 12,000 eager scalar ops (3 rows each: op, result
    buffer in the op row, scalar upload = 24,000 rows in ops+transfers) must wait for the
    writer, say so in run.json, and still store every row. (The writer drains every 0.1 s:
    with 2,000 rows the pure-Python path under a loaded suite made fewer rows than that
    between two drains and never waited; 200 rows is ~70 ops, 1.4 ms an op.)"""
    script = tmp_path / "bp.py"
    script.write_text(BACKPRESSURE_SCRIPT)
    out = tmp_path / "run"
    r = subprocess.run([*JAXPLACE, "run", "--trace", "off", "--out", str(out), str(script)],
                       env=_env(capture, JAXPLACE_BACKLOG_ROWS="200"), capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((out / "run.json").read_text())
    ev = m["events"]
    assert ev["lost_rows"] == 0
    assert ev["backpressure_waits"] >= 1
    assert ev["backpressure_s"] >= 0
    c = sqlite3.connect(out / "events.sqlite")
    try:
        mul = c.execute("SELECT COUNT(*) FROM ops WHERE name = 'multiply'").fetchone()[0]
        add = c.execute("SELECT COUNT(*) FROM ops WHERE name = 'add'").fetchone()[0]
        ups = c.execute("SELECT COUNT(*) FROM transfers WHERE api LIKE '%(Python scalar)'").fetchone()[0]
    finally:
        c.close()
    # 12,000 scalar operands and the fill value of jnp.ones (the guard logs 12,001 legs)
    assert (mul, add, ups) == (6000, 6000, 12001)


def test_without_back_pressure_nothing_waits(tmp_path):
    """The default limit (32,768 rows) is far above the ~1,200 rows this short run makes."""
    script = tmp_path / "small.py"
    script.write_text(BACKPRESSURE_SCRIPT.replace("6000", "200"))
    out = tmp_path / "run"
    r = subprocess.run([*JAXPLACE, "run", "--trace", "off", "--out", str(out), str(script)],
                       env=_env(None), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    ev = json.loads((out / "run.json").read_text())["events"]
    assert (ev["backpressure_waits"], ev["backpressure_s"], ev["lost_rows"]) == (0, 0.0, 0)


@needs_native
def test_packed_rows_come_back_as_the_same_tuples():
    """model/_packed.c: every value a raw row holds (model/raw.py) survives the round trip, a
    string is defined once per recorder and still known to the decoder in a later batch."""
    from jaxplace_cli.model.raw import packed_module

    packed = packed_module()
    assert packed is not None
    rb, dec = packed.RowBuffer(), packed.Decoder()
    sinks = [rb.sink(i, collections.deque()) for i in range(3)]  # what the recorder's tables become
    op = (7, 123, 45, 2**63 - 1, "jnp", "sin", "cpu:0", 3, (1, 2), 9, "", False, "", (8, 8), ("float32", 4), True)
    transfer = (8, 124, 1, "h2d", "host", "cpu:0", 4, True, False, "multiply (Python scalar)", 3, 0, 7)
    buffer = (10, 7, "cpu:1", (), ("bfloat16", 2), True, 3)
    odd = (9, -5, 2**80, None, "ünïcode ⚡", ((1,), ()))
    for table, row in ((0, op), (1, transfer), (2, buffer), (0, odd)):
        sinks[table].append(row)
    assert rb.pending == 4 and [len(s) for s in sinks] == [2, 1, 1]
    data, n_ops, n_transfers, n_buffers = rb.take()
    assert (n_ops, n_transfers, n_buffers, rb.pending) == (2, 1, 1, 0)
    assert dec.decode(data) == ([op, odd], [transfer], [buffer])
    sinks[0].append(op)  # its strings were defined in the first batch only
    data2, *_ = rb.take()
    assert len(data2) < len(data) and dec.decode(data2) == ([op], [], [])
    assert packed.Decoder().decode(b"") == ([], [], [])


@needs_native
def test_damaged_packed_rows_raise_and_never_crash():
    """The bytes come from jaxplace's own process, but a decoder must still stop cleanly."""
    from jaxplace_cli.model.raw import packed_module

    packed = packed_module()
    rb = packed.RowBuffer()
    fallback = collections.deque()
    sink = rb.sink(0, fallback)
    sink.append((1, "a", (2, 3), True))
    data, *_ = rb.take()
    for bad in (data[:-1], data[:5], b"R\x00s\x05\x00\x00\x00", b"X", b"R\x09N", b"R\x00(\xff\xff\xff\xff"):
        with pytest.raises(ValueError):
            packed.Decoder().decode(bad)
    sink.append((1.5,))  # no raw row holds a float: kept as it is, never an error in the script
    assert list(fallback) == [(1.5,)] and len(sink) == 1 and rb.pending == 0
