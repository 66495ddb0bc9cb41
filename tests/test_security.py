"""Security (issue 7, part 3): one test per claim of README's Security section.

1. audit (and every reader: diff, suggest) never executes anything from its input and never
   modifies it: traces are protobuf, run stores SQLite (opened read-only), manifests JSON.
2. Python policy files run only when named on the command line.
3. Output paths come from the command line, never from trace or run contents; reports are
   written atomically (a failed write leaves nothing).
The payloads below all try to leave a marker file behind; none may appear.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SCRIPTS, child_env, cli, jaxplace

JAXPLACE = Path(sys.executable).parent / "jaxplace"  # the console script: cwd is not on sys.path

_spec = importlib.util.spec_from_file_location("xspace", SCRIPTS / "faults" / "xspace.py")
xspace = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(xspace)


class _Boom:
    """Unpickling this runs os.system: the classic pickle payload."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _payloads(marker: Path) -> dict[str, str]:
    cmd = f"touch {marker}"
    return {
        "python": f"__import__('os').system({cmd!r})",
        "shell": f"$({cmd}); `{cmd}`",
        "sql": "x'); DROP TABLE ops; --",
        "pickle": base64.b64encode(pickle.dumps(_Boom(marker))).decode(),
        "pickle_raw": pickle.dumps(_Boom(marker), protocol=0).decode("latin-1"),
        "template": "{{ ''.__class__.__mro__[1].__subclasses__() }} {0.__class__}",
        "path": "../../../../tmp/jaxplace-escape",
    }


def _evil_module(marker: Path, name: str) -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).with_name({name!r} + '.ran').touch()\n"


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """A real run, then rewritten by an attacker: payloads in every text field of run.json and
    events.sqlite, a pickle in the store, and .py files named like modules jaxplace imports."""
    base = tmp_path_factory.mktemp("security")
    run = base / "run"
    proc = jaxplace("run", "-q", "--no-trace", "--out", run, SCRIPTS / "faults" / "busy.py", "0.2")
    assert proc.returncode == 0, proc.stderr
    marker = base / "PWNED"
    p = _payloads(marker)
    m = json.loads((run / "run.json").read_text())
    m.update(policy=f"{run}/evil.py:placer", target={"kind": "module", "name": "evil"},
             argv=["evil.py", p["shell"]], command=["sh", "-c", f"touch {marker}"], cwd=str(run),
             error=p["python"], host=p["path"], tool=p["template"], pickle=p["pickle"],
             trace={"mode": "window", "state": "closed", "files": [p["path"] + ".xplane.pb"],
                    "seconds": 1, "note": p["shell"]},
             hooks={"installed": [p["python"]], "unavailable": [p["shell"]]},
             placement={"policy": p["python"], "decisions": 1, "fallbacks": 0, "granularity": "unit",
                        "on_error": "raise", "devices": None})
    (run / "run.json").write_text(json.dumps(m))
    with contextlib.closing(sqlite3.connect(run / "events.sqlite")) as c, c:
        c.execute("UPDATE sites SET file = ?, function = ?", (p["sql"], p["python"]))
        c.execute("UPDATE transfers SET api = ?", (p["pickle_raw"],))
        c.execute("UPDATE ops SET name = ?, placed = ? WHERE seq % 2 = 0", (p["python"], p["template"]))
        c.execute("INSERT INTO markers VALUES (999999, 0, 'compile', ?)",
                  (json.dumps({"fun": p["python"], "op": p["sql"], "signature": [p["pickle"]]}),))
        c.execute("INSERT INTO markers VALUES (1000000, 0, 'policy-fallback', ?)",
                  (f"policy {p['python']} failed for op x at y:1: {p['shell']}",))
        c.execute("INSERT INTO markers VALUES (1000001, 0, 'step-begin', ?)", (p["pickle"] + "\t1",))
        c.execute("INSERT INTO meta VALUES ('pickle', ?)", (p["pickle"],))
        c.execute("CREATE TABLE blob (data BLOB)")
        c.execute("INSERT INTO blob VALUES (?)", (pickle.dumps(_Boom(marker)),))
        c.execute("CREATE TRIGGER boom AFTER INSERT ON ops BEGIN INSERT INTO blob VALUES ('fired'); END")
    for name in ("evil", "sitecustomize", "usercustomize", "__init__", "__main__", "conftest", "json",
                 "sqlite3", "jax", "numpy", "rich", "typer", "jaxplace_cli", "placers"):
        (run / f"{name}.py").write_text(_evil_module(marker, name))
    (run / "plugins" / "profile" / "x").mkdir(parents=True)
    (run / "plugins" / "profile" / "x" / "evil.py").write_text(_evil_module(marker, "plugin"))
    return base, run, marker


def _no_marker(base: Path) -> None:
    left = sorted(p.name for p in base.rglob("*") if p.name == "PWNED" or p.name.endswith(".ran"))
    assert not left, f"input was executed: {left}"


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["audit", "RUN"], ["audit", "RUN", "--format", "json"], ["audit", "RUN", "--format", "markdown"],
    ["audit", "RUN", "--format", "sarif"], ["audit", "RUN", "--format", "junit"],
    ["audit", "RUN", "-o", "OUT/report.json"], ["diff", "RUN", "RUN"],
    ["suggest", "RUN", "-o", "OUT/policy.toml"],
], ids=lambda a: " ".join(a))
def test_readers_never_execute_or_modify_their_input(hostile_run, argv, tmp_path):
    """Claim 1: no pickle, no imports, no eval, no shell, no SQL from the input; the input is
    byte for byte the same afterwards (the store is opened read-only: its trigger never
    fires). Run from inside the hostile directory with the console script."""
    base, run, marker = hostile_run
    before = _hashes(run)
    args = [a.replace("RUN", str(run)).replace("OUT", str(tmp_path)) for a in argv]
    proc = subprocess.run([str(JAXPLACE), *args], cwd=run, env=child_env(), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode in (0, 1), proc.stderr  # 1: suggest/diff verdicts; never a crash
    assert "Traceback" not in proc.stderr
    _no_marker(base)
    assert _hashes(run) == before
    assert not Path("/tmp/jaxplace-escape.xplane.pb").exists()


def test_python_policy_files_run_only_when_named(tmp_path):
    """Claim 2, in-process: rules files, built-in policies and device specs never import a
    .py file, even one named like the policy, next to it or in the cwd; a FILE.py:NAME does."""
    from jaxplace_cli.placement import load_policy

    marker = tmp_path / "PWNED"
    for name in ("rr", "pin", "default", "policy", "cpu", "rules", "placers"):
        (tmp_path / f"{name}.py").write_text(_evil_module(marker, name) + "def placer(op):\n    return None\n")
    (tmp_path / "policy.toml").write_text(
        '[[rule]]\nop = "__import__(\'os\').system(\'touch x\')"\nsite = "rr.py:1"\ndevice = "cpu:0"\n'
        '[default]\ndevice = "jax"\n')
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for spec in ("rr", "rr-strict", "pin:cpu:0", "default", "policy.toml", str(tmp_path / "policy.toml")):
            load_policy(spec)
        _no_marker(tmp_path)
        load_policy(f"{tmp_path}/placers.py:placer")  # named: runs, as documented
    finally:
        os.chdir(cwd)
    assert (tmp_path / "placers.ran").exists()
    assert not (tmp_path / "rr.ran").exists() and not (tmp_path / "policy.ran").exists()


@pytest.mark.slow
def test_run_with_a_rules_policy_imports_no_python_from_the_script_dir(tmp_path):
    """Claim 2, end to end: `jaxplace run --policy policy.toml script.py` next to .py files
    named like policies and like jaxplace's own modules runs none of them (the script's
    directory is on sys.path as with python, but only the script imports from it).

    The console script, not `python -m jaxplace_cli`: `-m` puts the cwd first on sys.path,
    so there a jaxplace_cli.py in the cwd would be imported instead of jaxplace (python's
    rule for every `python -m`; docs/reliability.md)."""
    marker = tmp_path / "PWNED"
    for name in ("rr", "policy", "placers", "sitecustomize", "jaxplace_cli"):
        (tmp_path / f"{name}.py").write_text(_evil_module(marker, name))
    (tmp_path / "policy.toml").write_text('[[rule]]\nop = "matmul"\ndevice = "cpu:1"\n')
    (tmp_path / "script.py").write_text("import jax.numpy as jnp\nprint(float((jnp.ones((2, 2)) @ jnp.ones((2, 2))).sum()))\n")
    proc = subprocess.run([str(JAXPLACE), "run", "-q", "--no-trace", "--devices", "2", "--policy",
                           "policy.toml", "--out", str(tmp_path / "r"), "script.py"], cwd=tmp_path,
                          env=child_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "8.0\n"
    _no_marker(tmp_path)


def test_output_paths_never_come_from_trace_contents(tmp_path):
    """Claim 3: a trace whose host, plane, line and stat names are paths; audit with and
    without -o. Nothing appears anywhere but the -o file."""
    sandbox = tmp_path / "sandbox"
    logdir = sandbox / "logs" / "plugins" / "profile" / "..%2F..%2Fescape"
    logdir.mkdir(parents=True)
    evil = "../../../escape"
    names = {1: "MemcpyH2D", 2: f"{evil}.json"}
    stats = {1: "memcpy_details", 2: "output", 3: "file"}
    events = [xspace.event(1, 1000, 500, [xspace.stat(1, "size:4096 dest:0 async:1"),
                                          xspace.stat(2, f"{tmp_path}/escape.json"), xspace.stat(3, evil)]),
              xspace.event(2, 2000, 10, [xspace.stat(2, "/tmp/escape.sarif")])]
    data = xspace.space([
        xspace.plane(1, "/device:GPU:0", [xspace.line(1, f"Stream #1({evil})", events)], names, stats),
        xspace.plane(2, f"/host:{evil}", [xspace.line(2, evil, [])], {}, {})])
    (logdir / "..%2F..%2Fescape.xplane.pb").write_bytes(data)
    before_tmp, before_sandbox = _tree(tmp_path), _tree(sandbox)
    for extra in ([], ["-o", str(sandbox / "report.json")]):
        proc = cli("audit", sandbox / "logs", *extra, cwd=sandbox)  # in-process: same main()
        assert proc.returncode == 0, proc.stderr
    assert _tree(sandbox) - before_sandbox == {"report.json"}
    assert _tree(tmp_path) - before_tmp == {"sandbox/report.json"}
    assert not Path("/tmp/escape.sarif").exists()


def test_failed_report_write_leaves_nothing(tmp_path):
    """Claim 3: reports are written atomically. A write that fails (the target is a
    directory) is one error line, exit 2, and leaves no temporary file."""
    from jaxplace_cli.report import write_atomic

    target = tmp_path / "report.json"
    target.mkdir()
    with pytest.raises(OSError):
        write_atomic(target, "x" * 100_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    assert target.is_dir() and not any(target.iterdir())


def test_report_file_mode_follows_umask(tmp_path):
    from jaxplace_cli.report import write_atomic

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_suggest_verify_runs_no_code_from_the_run_directory(tmp_path, where):
    """`suggest RUN --verify SCRIPT` replays SCRIPT in the run's recorded working directory; a
    hostile run.json names a directory of the run itself that holds a `jaxplace_cli` package
    (relative, as the attacker cannot know where the run is unpacked, or absolute). The replay
    must run jaxplace, not that package, and the user's SCRIPT, not a file of that name there."""
    work = tmp_path / "work"
    run = work / "evilrun"
    shutil.copytree(REPO / "tests" / "data" / "golden_runs" / "pingpong_eager", run)
    evil = run / "x"
    (evil / "jaxplace_cli").mkdir(parents=True)
    (evil / "jaxplace_cli" / "__init__.py").write_text("")
    (evil / "jaxplace_cli" / "__main__.py").write_text(_evil_module(tmp_path / "PWNED", "jaxplace_cli"))
    (evil / "train.py").write_text(_evil_module(tmp_path / "PWNED", "train"))
    m = json.loads((run / "run.json").read_text())
    m["cwd"] = "evilrun/x" if where == "relative" else str(evil)
    (run / "run.json").write_text(json.dumps(m))
    (work / "train.py").write_text("print('the user script')\n")
    proc = subprocess.run([str(JAXPLACE), "suggest", "evilrun", "-o", str(tmp_path / "p.toml"), "--verify", "train.py",
                           "--out", str(tmp_path / "verify")], cwd=work, env=child_env(), capture_output=True, text=True,
                          timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr
    _no_marker(tmp_path)
    assert "verification: jaxplace run --no-trace" in proc.stdout, proc.stdout  # the replay ran, as jaxplace
    assert (tmp_path / "verify" / "run.json").exists()
