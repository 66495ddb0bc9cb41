"""Data lost is data said (issue 25, items 1, 2 and 4): exact loss after a fault, in every
command and every gate, and damaged run directories refused.

Ground truth by hand: tests/scripts/faults/steps.py makes, for N steps, 2 N + 1 ops and 3 N
transfers (its header says which lines make which). Each fault compares ``lost_rows`` and the
``recording-incomplete`` finding with what is actually missing from the store.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SCRIPTS, alive, child_env, cli, jaxplace, writer_pids

STEPS = SCRIPTS / "faults" / "steps.py"


def truth(n: int) -> tuple[int, int]:
    """(ops, transfers) of ``steps.py N``, counted by hand from its source."""
    return 2 * n + 1, 3 * n + 1


def manifest(run_dir) -> dict:
    return json.loads((Path(run_dir) / "run.json").read_text())


def stored(run_dir) -> tuple[int, int]:
    with sqlite3.connect(f"file:{Path(run_dir) / 'events.sqlite'}?mode=ro", uri=True) as c:
        return (c.execute("SELECT COUNT(*) FROM ops").fetchone()[0],
                c.execute("SELECT COUNT(*) FROM transfers").fetchone()[0])


def progress(run_dir) -> dict:
    with sqlite3.connect(f"file:{Path(run_dir) / 'events.sqlite'}?mode=ro", uri=True) as c:
        return {t: (d, k) for t, d, k in c.execute("SELECT tbl, dispatched, committed FROM progress")}


def run_cmd(out, *args, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "run", "-q", "--no-trace",
                             "--out", str(out), str(STEPS), *map(str, args)], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def loss_finding(run_dir) -> dict | None:
    proc = cli("audit", run_dir, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    found = [f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "recording-incomplete"]
    assert len(found) <= 1
    return found[0] if found else None


def assert_every_command_says_it(run_dir, lost: int, scratch: Path) -> None:
    """audit, a budget gate, diff (and its gate), report, export and suggest name the loss;
    the gates fail."""
    text = cli("audit", run_dir, "--format", "text")
    assert text.returncode == 0 and "recording-incomplete" in text.stdout, text.stderr
    assert f"lost {lost:,} of" in " ".join(text.stdout.split())
    gate = cli("audit", run_dir, "--max-h2d", 10**9, "--format", "text")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "Budget FAILED" in gate.stdout and f"lost {lost:,} of" in " ".join(gate.stdout.split())
    diff = cli("diff", run_dir, run_dir, "--fail-on-increase", 50)
    assert diff.returncode == 1 and f"lost {lost:,} of" in diff.stderr, diff.stdout + diff.stderr
    assert f"lost {lost:,} of" in " ".join(diff.stdout.split())
    html = scratch / "report.html"
    report = cli("report", run_dir, "-o", html)
    assert report.returncode == 0 and f"lost {lost:,} of" in html.read_text(), report.stderr
    trace = scratch / "trace.json"
    export = cli("export", run_dir, "--perfetto", trace)
    assert export.returncode == 0 and f"lost {lost:,} of" in trace.read_text(), export.stderr
    suggest = cli("suggest", run_dir)
    assert f"lost {lost:,} of" in " ".join(suggest.stdout.split()), suggest.stdout + suggest.stderr


# -- a complete run: nothing lost, nothing said ---------------------------------------------------

def test_complete_run_matches_ground_truth_and_says_nothing(tmp_path):
    n = 200
    proc = run_cmd(tmp_path / "run", n)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out == f"ready\ndone {n}\n"
    ops, transfers = truth(n)
    ev = manifest(tmp_path / "run")["events"]
    assert (ev["ops"], ev["transfers"], ev["lost_rows"]) == (ops, transfers, 0)
    assert stored(tmp_path / "run") == (ops, transfers)
    assert progress(tmp_path / "run") == {"ops": (ops, ops), "transfers": (transfers, transfers)}
    assert loss_finding(tmp_path / "run") is None
    assert not (tmp_path / "run" / ".events-reserve").exists()
    assert not (tmp_path / "run" / ".manifest-reserve").exists()


# -- disk full ------------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs where the test runs as root; else None (RLIMIT_FSIZE instead)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    ok = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True).returncode == 0
    yield mnt if ok else None
    if ok:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fsize_limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (600_000, 600_000))


def test_disk_full_loss_is_exact_and_every_command_says_it(tmp_path, small_disk):
    n = 12_000
    out = (small_disk or tmp_path) / "run"
    proc = run_cmd(out, n, preexec_fn=None if small_disk else _fsize_limit)
    stdout, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert stdout == f"ready\ndone {n}\n"  # the script is unaffected
    m = manifest(out)
    assert m["status"] == "complete"  # run.json was finalised on the full disk
    ops, transfers = truth(n)
    s_ops, s_transfers = stored(out)
    assert s_ops + s_transfers < ops + transfers
    ev = m["events"]
    assert (ev["ops"], ev["transfers"]) == (ops, transfers)
    assert ev["lost_rows"] == ops + transfers - s_ops - s_transfers
    assert not (out.parent / "run" / "run.json.tmp").exists()
    f = loss_finding(out)
    assert f["severity"] == "error" and f["count"] == ev["lost_rows"]
    assert "disk was full" in f["message"]
    assert_every_command_says_it(out, ev["lost_rows"], tmp_path)


def test_out_on_a_full_disk_is_one_line_exit_2(tmp_path, small_disk):
    if small_disk is None:
        pytest.skip("needs root to mount a small tmpfs")
    with open(small_disk / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    proc = jaxplace("run", "--no-trace", "--out", small_disk / "run", STEPS, 3)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxplace: error:"), proc.stderr


def test_disk_full_then_killed_loss_is_counted_from_the_store(tmp_path, small_disk):
    """run.json not finalised (SIGKILL after the disk filled): the store's own counts say how
    many events the writer was handed and could not keep."""
    if small_disk is None:
        pytest.skip("needs root to mount a small tmpfs")
    out = small_disk / "run"
    proc = run_cmd(out, 0)
    assert proc.stdout.readline() == "ready\n"
    deadline = time.monotonic() + 120
    while os.statvfs(small_disk).f_bavail > 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # a few more batches fail
    kill_and_wait_for_writer(proc, out)
    assert manifest(out)["status"] == "running"
    prog = progress(out)
    s_ops, s_transfers = stored(out)
    assert (prog["ops"][1], prog["transfers"][1]) == (s_ops, s_transfers)
    lost = prog["ops"][0] - s_ops + prog["transfers"][0] - s_transfers
    assert lost > 0
    f = loss_finding(out)
    assert f["count"] == lost and "disk was full" in f["message"] and "without finalising" in f["message"]
    assert_every_command_says_it(out, lost, tmp_path)


def kill_and_wait_for_writer(proc, out) -> None:
    """SIGKILL the recording process, then wait for its writer (which sees EOF, stores what it
    was sent and its last counts, and exits) to be gone."""
    writers = writer_pids(out)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while any(alive(w) for w in writers) and time.monotonic() < deadline:
        time.sleep(0.02)



# -- the writer process killed --------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc (Linux)")
def test_writer_killed_loss_is_exact(tmp_path):
    n = 6_000
    out = tmp_path / "run"
    proc = run_cmd(out, n)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.5)
    (writer,) = writer_pids(out)
    os.kill(writer, signal.SIGKILL)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert stdout == f"done {n}\n"
    ops, transfers = truth(n)
    s_ops, s_transfers = stored(out)
    ev = manifest(out)["events"]
    assert (ev["ops"], ev["transfers"]) == (ops, transfers)
    assert ev["lost_rows"] == ops + transfers - s_ops - s_transfers > 0
    f = loss_finding(out)
    assert f["count"] == ev["lost_rows"] and "writer process died" in f["message"]
    gate = cli("audit", out, "--max-d2h", 10**9)
    assert gate.returncode == 1, gate.stdout + gate.stderr


# -- a run directory known by its store -----------------------------------------------------------

@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("small") / "run"
    proc = jaxplace("run", "-q", "--out", out, STEPS, 30)  # with its trace window
    assert proc.returncode == 0, proc.stderr
    return out


def _copy(run, dst):
    import shutil

    shutil.copytree(run, dst, symlinks=True)
    return dst


DAMAGED = [("audit", how) for how in ("missing", "fifo", "dev_zero", "garbage", "empty", "directory")]
DAMAGED += [(command, how) for command in ("report", "export", "suggest", "diff") for how in ("missing", "fifo")]


@pytest.mark.parametrize(("command", "how"), DAMAGED)
def test_store_without_a_readable_manifest_is_a_damaged_run(tmp_path, small_run, how, command):
    run = _copy(small_run, tmp_path / "run")
    m = run / "run.json"
    m.unlink()
    if how == "fifo":
        os.mkfifo(m)
    elif how == "dev_zero":
        m.symlink_to("/dev/zero")
    elif how == "garbage":
        m.write_bytes(b"\x00\xffnot json")
    elif how == "empty":
        m.write_text("")
    elif how == "directory":
        m.mkdir()
    args = {"audit": ("audit", run), "report": ("report", run, "-o", tmp_path / "r.html"),
            "export": ("export", run, "--perfetto", tmp_path / "t.json"),
            "suggest": ("suggest", run), "diff": ("diff", run, run)}[command]
    proc = jaxplace(*args, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "run.json" in lines[0], proc.stderr
    assert proc.stdout == ""


def _flip_page(store: Path, page: int) -> None:
    data = bytearray(store.read_bytes())
    off = page * 4096 + 100
    for i in range(off, min(off + 64, len(data))):
        data[i] ^= 0xA5
    store.write_bytes(bytes(data))


@pytest.mark.parametrize("command", ["audit", "report", "export", "suggest", "diff"])
def test_store_failing_its_integrity_check_is_exit_2_in_every_command(tmp_path, small_run, command):
    """Every page but the schema's, damaged in turn: no command passes a store SQLite calls
    malformed (some pages only ``suggest`` read before: issue 25)."""
    pages = (small_run / "events.sqlite").stat().st_size // 4096
    damaged = 0
    for page in range(1, pages):
        if damaged == 3:  # three pages SQLite calls malformed, per command
            break
        run = _copy(small_run, tmp_path / f"run{page}")
        _flip_page(run / "events.sqlite", page)
        c = sqlite3.connect(run / "events.sqlite")
        try:
            healthy = c.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        except sqlite3.DatabaseError:
            healthy = False
        c.close()
        if healthy:
            continue
        damaged += 1
        args = {"audit": ("audit", run), "report": ("report", run, "-o", tmp_path / "r.html"),
                "export": ("export", run, "--perfetto", tmp_path / "t.json"),
                "suggest": ("suggest", run), "diff": ("diff", run, run)}[command]
        proc = jaxplace(*args, timeout=60)
        assert proc.returncode == 2, (page, proc.returncode, proc.stdout[-300:], proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert damaged, "no page of the store was found damaged"


def test_in_process_gates_fail_on_lost_data(tmp_path, small_run):
    """What the pytest plugin, ``jaxplace_cli.budget()`` and ``jaxplace run --budget`` share
    (``judge_run``) fails a run whose manifest counts more events than its store holds."""
    from jaxplace_cli.analysis.budgets import judge_run
    from jaxplace_cli.analysis.run import open_run
    from jaxplace_cli.integrations.budget import limits_to_budget

    run_dir = _copy(small_run, tmp_path / "run")
    m = manifest(run_dir)
    m["events"]["ops"] += 5  # the recorder made 5 ops the store never got
    m["events"]["transfers"] += 2
    (run_dir / "run.json").write_text(json.dumps(m))
    run = open_run(run_dir)
    try:
        result = judge_run(run, limits_to_budget({"d2h": 10**6}, "test"))
    finally:
        run.store.close()
    (breach,) = result.budget.breaches
    assert (breach.rule, breach.actual) == ("recording-incomplete", 7)
    assert "lost 7 of" in breach.message and "(5 ops, 2 transfers)" in breach.message
    assert result.findings[0].rule == "recording-incomplete" and result.findings[0].severity == "error"
