"""Bad input to `run`, `audit` and `devices`: one line saying what is wrong, exit code 2,
nothing half-written (issue 2 acceptance)."""
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS, child_env, jaxplace


def _one_line_error(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("Try ")), proc.stderr
    assert lines[0].startswith("jaxplace: error: ")
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_missing_script(tmp_path):
    proc = jaxplace("run", "--out", tmp_path / "r", tmp_path / "nope.py")
    _one_line_error(proc, "nope.py", "no such file")
    assert not (tmp_path / "r").exists()


def test_missing_module(tmp_path):
    proc = jaxplace("run", "--out", tmp_path / "r", "-m", "no_such_module_jaxplace")
    _one_line_error(proc, "No module named 'no_such_module_jaxplace'")


def test_nothing_to_run():
    _one_line_error(jaxplace("run"), "nothing to run")


def test_out_dir_not_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = jaxplace("run", "--out", blocker / "run", SCRIPTS / "exit_code.py", "0")
    _one_line_error(proc, "cannot write to run directory")


def test_out_dir_existing_run_is_never_overwritten(tmp_path):
    out = tmp_path / "run"
    assert jaxplace("run", "-q", "--no-trace", "--out", out, SCRIPTS / "exit_code.py", "0").returncode == 0
    before = (out / "run.json").read_text()
    proc = jaxplace("run", "--out", out, SCRIPTS / "exit_code.py", "0")
    _one_line_error(proc, "already exists", "never overwrites")
    assert (out / "run.json").read_text() == before


@pytest.mark.parametrize("option", [["--trace", "sometimes"], ["--record", "most"],
                                    ["--granularity", "atom"], ["--on-policy-error", "ignore"],
                                    ["--devices", "0"]])
def test_bad_run_options(tmp_path, option):
    _one_line_error(jaxplace("run", *option, "--out", tmp_path / "r", SCRIPTS / "exit_code.py"))


def test_audit_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    _one_line_error(jaxplace("audit", tmp_path), "is not a jaxplace run")


def test_audit_missing_path(tmp_path):
    _one_line_error(jaxplace("audit", tmp_path / "missing"), "does not exist")


def test_audit_corrupt_events_store(tmp_path):
    out = tmp_path / "run"
    assert jaxplace("run", "-q", "--no-trace", "--out", out, SCRIPTS / "exit_code.py", "0").returncode == 0
    (out / "events.sqlite").write_bytes(b"this is not sqlite" * 100)
    for extra in ("events.sqlite-wal", "events.sqlite-shm"):
        (out / extra).unlink(missing_ok=True)
    _one_line_error(jaxplace("audit", out), "events.sqlite")


def test_audit_corrupt_manifest(tmp_path):
    out = tmp_path / "run"
    assert jaxplace("run", "-q", "--no-trace", "--out", out, SCRIPTS / "exit_code.py", "0").returncode == 0
    (out / "run.json").write_text("{ truncated")
    _one_line_error(jaxplace("audit", out), "run.json", "corrupt")


def test_unknown_option_and_command():
    _one_line_error(jaxplace("audit", "--frobnicate", "x"))
    _one_line_error(jaxplace("launch"))


def test_the_console_script_runs_a_module_of_the_working_directory_as_python_m_does(tmp_path):
    """`jaxplace run -m mod` through the installed `jaxplace` command (whose own sys.path[0] is
    the venv's bin/, not the working directory as under `python -m jaxplace_cli`): a module and
    a package module with a relative import, found in the cwd as `python -m` finds them."""
    (tmp_path / "topmod.py").write_text("import sys\nprint('top', __name__, sys.argv[1:])\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helper.py").write_text("X = 5\n")
    (tmp_path / "pkg" / "mymod.py").write_text("from . import helper\nprint('pkg', __name__, helper.X)\n")
    console = Path(sys.executable).parent / "jaxplace"
    for argv in (["-m", "topmod", "a", "--out"], ["-m", "pkg.mymod"]):
        want = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                              timeout=120)
        got = subprocess.run([str(console), "run", "-q", "--no-trace", "--out", str(tmp_path / argv[1]), *argv],
                             cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=120)
        assert want.returncode == 0 and got.returncode == 0, got.stderr
        assert got.stdout == want.stdout, (argv, got.stdout, want.stdout)


def test_a_package_without_main_is_one_line_in_pythons_words(tmp_path):
    """`-m pkg` where pkg has no __main__.py: python's sentence, one line (it was runpy's
    traceback with a chained ImportError); the package is not imported to find out."""
    (tmp_path / "nomain").mkdir()
    (tmp_path / "nomain" / "__init__.py").write_text("raise SystemExit('imported')\n")
    proc = jaxplace("run", "--out", tmp_path / "r", "-m", "nomain", cwd=tmp_path)
    _one_line_error(proc, "No module named nomain.__main__; 'nomain' is a package and cannot be directly executed")
