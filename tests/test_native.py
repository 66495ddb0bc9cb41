"""Issue 18: the native capture hot path (capture/_native.c) and its pure-Python twin.

Both paths must append the same rows: every sample script is recorded twice, once per path, and
the two stores (time columns aside) and the two ``audit --format json`` reports (timings aside)
must be equal. A build without the extension must still run, and say ``capture: python``.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p.name for p in (REPO / "sample_scripts").glob("*.py"))
JAXPLACE = [sys.executable, "-m", "jaxplace_cli"]
TIME_COLUMNS = {"ts_ns", "dur_ns", "thread"}

pytestmark = pytest.mark.slow


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
        for table in ("sites", "ops", "transfers", "buffers"):
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})")]
            keep = [col for col in cols if col not in TIME_COLUMNS]
            order = "id" if table == "sites" else ("buf" if table == "buffers" else "seq")
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
    r = subprocess.run([*JAXPLACE, "audit", str(run), "--format", "json"], capture_output=True,
                       text=True, timeout=240)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return _without_timings(json.loads(r.stdout))


def test_the_extension_is_built_here():
    """`make test` installs with a C compiler present, so the native path must be there: a
    silently missing build would make every other test here compare Python with Python."""
    from jaxplace_cli.capture import native

    assert native.module() is not None, native.why_python()
    assert native.kind() == "native"


@pytest.mark.parametrize("script", SAMPLES)
def test_native_and_python_paths_record_the_same_rows(tmp_path, script):
    native = _record(tmp_path, script, None, "native")
    python = _record(tmp_path, script, "python", "python")
    assert json.loads((native / "run.json").read_text())["capture"] == "native"
    assert json.loads((python / "run.json").read_text())["capture"] == "python"
    a, b = _rows(native), _rows(python)
    for table in a:
        assert a[table] == b[table], f"{script}: table {table} differs between the paths"
    assert _audit(native) == _audit(python)


def test_a_failed_extension_import_falls_back_to_python(tmp_path):
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
    native = _record(tmp_path, "pingpong_eager.py", None, "native")
    assert _rows(broken) == _rows(native)
    # pingpong_eager.py: 9 device_put + 5 multiply = 14 ops (hand count in test_golden_runs' case)
    assert len(_rows(broken)["ops"]) == 14


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
    """With a backlog limit of 2,000 rows, 12,000 eager scalar ops (3 rows each: op, result
    buffer in the op row, scalar upload = 24,000 rows in ops+transfers) must wait for the
    writer, say so in run.json, and still store every row."""
    script = tmp_path / "bp.py"
    script.write_text(BACKPRESSURE_SCRIPT)
    out = tmp_path / "run"
    r = subprocess.run([*JAXPLACE, "run", "--trace", "off", "--out", str(out), str(script)],
                       env=_env(capture, JAXPLACE_BACKLOG_ROWS="2000"), capture_output=True,
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
    assert (mul, add, ups) == (6000, 6000, 12000)


def test_without_back_pressure_nothing_waits(tmp_path):
    """The default limit (131,072 rows) is far above what this short run leaves behind."""
    script = tmp_path / "small.py"
    script.write_text(BACKPRESSURE_SCRIPT.replace("6000", "200"))
    out = tmp_path / "run"
    r = subprocess.run([*JAXPLACE, "run", "--trace", "off", "--out", str(out), str(script)],
                       env=_env(None), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    ev = json.loads((out / "run.json").read_text())["events"]
    assert (ev["backpressure_waits"], ev["backpressure_s"], ev["lost_rows"]) == (0, 0.0, 0)
