"""Bad input to `run`, `audit` and `devices`: one line saying what is wrong, exit code 2,
nothing half-written (issue 2 acceptance)."""
import pytest
from conftest import SCRIPTS, jaxplace


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
