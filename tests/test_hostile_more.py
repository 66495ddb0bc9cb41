"""More hostile inputs (after issue 15's corpus in test_hostile.py): each case one test, run
through the real CLI (``cli`` in this process, or ``jaxplace`` / a subprocess where the command
serves, may hang or may need a memory limit), on a copy of a golden run or a file built here.

Every case was an internal error (exit 3), a hang, unbounded memory or a write through a
planted symlink before its fix; now a data error is one line on stderr and exit 2."""
from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, child_env, cli

sys.path.insert(0, str(REPO / "tests" / "scripts" / "faults"))
import xspace  # noqa: E402
from test_hostile import _in_wal, _run, _sql  # noqa: E402 - a copy of a golden run, SQL on its store

AS_LIMIT = 2 << 30  # bytes of address space for a child that could otherwise eat memory


def _data_error(r, *words) -> None:
    """Exit 2, one line on stderr naming ``words``, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    for w in words:
        assert w in r.stderr, r.stderr


def _limited(*args, timeout=120) -> subprocess.CompletedProcess:
    """`jaxplace ARGS` in a child limited to AS_LIMIT bytes of address space."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    return subprocess.run([sys.executable, "-m", "jaxplace_cli", *map(str, args)], env=child_env(),
                          capture_output=True, text=True, timeout=timeout, preexec_fn=limit)


def _remove_deep(deepest: Path, top: Path) -> None:
    """Remove a deep chain of empty directories from its bottom (pytest's own clean-up of old
    temp dirs recurses per level and fails on it)."""
    while deepest != top:
        deepest.rmdir()
        deepest = deepest.parent


# -- view -------------------------------------------------------------------------------------

def _trace_dir(path: Path) -> Path:
    (path / "plugins" / "profile" / "s1").mkdir(parents=True)
    (path / "plugins" / "profile" / "s1" / "h.xplane.pb").write_bytes(xspace.small_gpu_trace())
    return path


def _view_until_listening(path: Path, tmp: Path) -> tuple[int, str, str]:
    """`jaxplace view PATH --port 0` until it says its URL, then Ctrl-C: (exit code, stderr,
    XProf's log as it was then). A command that never says it (a hang) is killed after 120 s
    and fails the test."""
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "view", str(path), "--port", "0"],
                            env=child_env(TMPDIR=str(tmp)), stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)
    err, deadline = b"", time.monotonic() + 120
    try:
        while b"127.0.0.1:" not in err and proc.poll() is None and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 1)[0]:
                err += os.read(proc.stderr.fileno(), 65536)
        assert b"127.0.0.1:" in err, err.decode(errors="replace")[-2000:]
        logs = list(tmp.glob("jaxplace-xprof-*.log"))
        log = logs[0].read_text() if len(logs) == 1 else ""
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        return code, (err + proc.stderr.read()).decode(errors="replace"), log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_view_writes_no_log_through_a_symlink_planted_in_the_run(tmp_path):
    run = _trace_dir(tmp_path / "run")
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    (run / "xprof.log").symlink_to(victim)
    (tmp_path / "tmp").mkdir()
    code, err, log_text = _view_until_listening(run, tmp_path / "tmp")
    assert code == 0, err
    assert victim.read_text() == "untouched\n"
    assert os.readlink(run / "xprof.log") == str(victim)
    assert sorted(p.name for p in run.iterdir()) == ["plugins", "xprof.log"]
    log = re.search(r"XProf's own messages go to (\S+)", err).group(1)
    assert Path(log).parent == tmp_path / "tmp" and "profile_plugin" in log_text, log_text
    assert not Path(log).exists() and not list((tmp_path / "tmp").iterdir())  # a clean stop leaves nothing


def test_view_of_a_tree_1100_levels_deep_serves_and_stops(tmp_path):
    run = _trace_dir(tmp_path / "run")
    d = run
    for _ in range(1100):
        d = d / "d"
        d.mkdir()
    (tmp_path / "tmp").mkdir()
    try:
        code, err, _log = _view_until_listening(run, tmp_path / "tmp")
    finally:
        _remove_deep(d, run)
    assert code == 0 and "Traceback" not in err and "internal error" not in err, err[-2000:]
    assert "trace_viewer?run=s1" in err


# -- job.json ---------------------------------------------------------------------------------

def _job(tmp: Path) -> Path:
    job = tmp / "job"
    job.mkdir()
    _run(job, "proc-0")
    return job


def test_job_json_fifo_and_dev_zero_are_data_errors(tmp_path):
    for name, make in (("fifo", os.mkfifo), ("zero", lambda p: p.symlink_to("/dev/zero"))):
        (tmp_path / name).mkdir()
        job = _job(tmp_path / name)
        make(job / "job.json")
        _data_error(_limited("audit", job), "job.json", "not a regular file")


def test_job_json_of_wrong_types_or_nested_deep_is_a_data_error(tmp_path):
    job = _job(tmp_path)
    for text, words in [('{"schema_version": 1, "processes": 5}', ("processes",)),
                        ('{"schema_version": 1, "processes": [{"index": [1]}]}', ("processes[0].index",)),
                        ('{"schema_version": 1, "processes": [{"index": 0, "exit_code": "1"}]}',
                         ("processes[0].exit_code",)),
                        ('{"schema_version": 1, "process_count": 1000000000000}', ("process_count",)),
                        ('{"schema_version": 1, "processes": ' + "[" * 100_000 + "]" * 100_000 + "}",
                         ("nested",))]:
        (job / "job.json").write_text(text)
        _data_error(cli("audit", job), "job.json", *words)
    (job / "job.json").write_text('{"schema_version": 1, "process_count": 1, "status": "complete", "exit_code": 0, '
                                  '"processes": [{"index": 0, "pid": 7, "exit_code": 0, "signal": null, '
                                  '"stopped_by_launch": false}], "first_failure": null}')
    r = cli("audit", job)
    assert r.returncode in (0, 1), r.stderr


# -- stores -----------------------------------------------------------------------------------

def test_a_generated_column_the_schema_check_did_not_see_is_a_data_error(tmp_path):
    """PRAGMA table_info hides generated columns: the store passed the check and SELECT *
    computed a 1 GB zeroblob per row (5.9 GB, then exit 3)."""
    run = _run(tmp_path)
    _sql(run, "ALTER TABLE sites ADD COLUMN g0 BLOB GENERATED ALWAYS AS (zeroblob(1000000000)) VIRTUAL")
    for cmd in ("audit", "suggest"):
        _data_error(_limited(cmd, run), "sites", "columns")


def test_a_column_that_declares_a_collation_is_a_data_error(tmp_path):
    """``kind TEXT COLLATE NOCASE`` passes PRAGMA table_xinfo (it says TEXT): SQL would compare
    'H2D' equal to 'h2d' while the C reader's grouping (store/groups.py) keeps them apart, two
    numbers for one store. jaxplace declares no collation; a store that does is not its own."""
    run = _run(tmp_path)
    with contextlib.closing(sqlite3.connect(run / "events.sqlite")) as c, c:
        sql = c.execute("SELECT sql FROM sqlite_master WHERE name = 'transfers'").fetchone()[0]
        c.execute("ALTER TABLE transfers RENAME TO old_transfers")
        c.execute(sql.replace("kind TEXT", "kind TEXT COLLATE NOCASE"))
        c.execute("INSERT INTO transfers SELECT * FROM old_transfers")
        c.execute("DROP TABLE old_transfers")
        c.execute("UPDATE transfers SET kind = upper(kind) WHERE rowid % 2 = 0")
    for cmd in ("audit", "suggest"):
        _data_error(_limited(cmd, run), "collation")


def test_a_killed_runs_wal_is_read_by_the_c_reader_from_the_settled_copy(tmp_path):
    """A killed run's rows in its -wal: the reader's private copy is checkpointed and opened
    immutable for store/columns.py's C reader, which then sees the WAL's rows as SQL does; the
    run directory gets no -shm and its -wal is untouched."""
    from jaxplace_cli.store import columns
    from jaxplace_cli.store.reader import StoreReader

    run = _run(tmp_path)
    _in_wal(run, "INSERT INTO transfers (seq, kind, src, dst, bytes, implicit, blocking, api, site, buf, op_seq, "
                 "ts_ns, thread) VALUES (99999, 'h2d', 'host', 'cpu:0', 12345, 0, 0, 'x', 0, 0, 0, 0, 0)")
    wal = (run / "events.sqlite-wal").read_bytes()
    reader = StoreReader(run / "events.sqlite")
    try:
        assert reader.uri and reader.uri.endswith("?mode=ro&immutable=1") and "jaxplace-store-" in reader.uri
        by_sql = [r[0] for r in reader.conn.execute("SELECT bytes FROM transfers ORDER BY rowid")]
        cols = columns.int_columns(reader, "transfers", {"bytes": "bytes"})
        assert columns.NATIVE is None or columns.native_reader(reader) is not None
        assert cols["bytes"].tolist() == by_sql and by_sql[-1] == 12345
    finally:
        reader.close()
    assert not (run / "events.sqlite-shm").exists() and (run / "events.sqlite-wal").read_bytes() == wal


# -- JSON files -------------------------------------------------------------------------------

def test_an_unterminated_string_of_escaped_quotes_is_read_in_one_pass(tmp_path):
    """'"' + '\\"' * n: the depth pre-check's string pattern started a failing scan at every
    quote (quadratic: 19 s for 80 KB; this 320 KB file took minutes). A run.json and a diff
    baseline, each a data error within the 60 s the child is given."""
    text = '"' + '\\"' * 160_000
    run = _run(tmp_path)
    (run / "run.json").write_text(text)
    _data_error(_limited("audit", run, timeout=60), "run.json")
    base = tmp_path / "base.json"
    base.write_text(text)
    _data_error(_limited("diff", base, _run(tmp_path, "run2"), timeout=60), "base.json")


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def test_a_site_text_marker_nested_deep_is_skipped(tmp_path):
    run = _run(tmp_path)
    _sql(run, "INSERT INTO markers VALUES (9999, 0, 'site-text', ?)", args=(_deep(4000),))
    r = cli("diff", _run(tmp_path, "base"), run)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_memory_and_upload_markers_nested_deep_are_data_errors(tmp_path):
    from jaxplace_cli.model.errors import DataError
    from jaxplace_cli.store.reader import StoreReader
    from jaxplace_cli.store.schema import MEMORY_TABLES, create_sql
    from jaxplace_cli.store.uploads import host_data

    for kind in ("oom", "memory_stats"):
        run = _run(tmp_path, kind)
        _sql(run, *(create_sql(n, cls) for n, cls in MEMORY_TABLES.items()))
        _sql(run, "INSERT INTO markers VALUES (9999, 0, ?, ?)", args=(kind, _deep(40_000)))
        _data_error(cli("audit", run), "markers", kind)
    run = _run(tmp_path, "host_data")  # read by suggest's upload rule only for implicit uploads
    _sql(run, "INSERT INTO markers VALUES (9999, 0, 'host_data', ?)", args=(_deep(40_000),))
    store = StoreReader(run / "events.sqlite")
    try:
        with pytest.raises(DataError, match="host_data marker at seq 9999 is damaged"):
            host_data(store)
    finally:
        store.close()


def test_sizes_jaxplace_never_writes_are_a_data_error_in_suggest_and_audit(tmp_path):
    from jaxplace_cli.store.schema import MEMORY_TABLES, create_sql

    for i, stmt in enumerate(("UPDATE buffers SET bytes = -1", "UPDATE transfers SET bytes = 1e308",
                              "UPDATE buffers SET bytes = 1e308")):
        run = _run(tmp_path, f"run{i}")
        _sql(run, *(create_sql(n, cls) for n, cls in MEMORY_TABLES.items()))
        _sql(run, stmt)
        _data_error(cli("suggest", run), stmt.split()[1], "bytes")
        if "buffers" in stmt:  # the audit says the same of a size jaxplace never writes (it skipped -1)
            _data_error(cli("audit", run), "buffers", "bytes")


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_numbers_of_thousands_of_digits_in_a_trace_are_sizes_not_known(tmp_path, fmt):
    """A GPU memcpy whose `size:` has 4,000 digits (under Python's 4,300-digit int limit) and a
    host-offload copy-start whose shape has dimensions of 4,000 digits: the sizes are not int64,
    so they are unknown (as a size the trace does not state); they overflowed every float
    conversion later (internal error, exit 3) and the shape's product cost time quadratic in
    its length."""
    nines = "9" * 4000
    gpu = [xspace.event(1, 1000, 500, [xspace.stat(1, f"size:{nines} dest:0 async:0")])]
    offload = f"%copy-start.1 = (f32[2]{{0:S(5)}}, u32[]) copy-start(f32[{nines},{nines}]{{1,0:S(5)}} %p)"
    (tmp_path / "t.xplane.pb").write_bytes(xspace.space([
        xspace.plane(1, "/device:GPU:0", [xspace.line(1, "Stream #1(MemcpyH2D)", gpu)], {1: "MemcpyH2D"},
                     {1: "memcpy_details"}),
        xspace.plane(2, "/device:TPU:0", [xspace.line(2, "XLA Ops", [xspace.event(1, 3000, 100)])], {1: offload}, {}),
        xspace.plane(3, "/host:CPU", [], {}, {})]))
    r = cli("audit", tmp_path / "t.xplane.pb", "--format", fmt)
    assert r.returncode == 0, r.stderr[-2000:]
    assert nines not in r.stdout and "internal error" not in r.stderr
    if fmt == "json":  # the memcpy is still counted: one transfer of unknown size
        import json

        assert json.loads(r.stdout)["transfers"]["unknown_size"]["h2d"] == 1


def test_the_html_matrix_of_thousands_of_endpoints_stays_small_and_exact(tmp_path):
    """3,000 host-to-device uploads, each to a device of its own: the matrix draws 64 endpoints
    (the 2,938 that moved least as one row and column) and its cells still add up to the audit's
    totals; the page was 198 MiB (a cell for every pair) and took 1.3 GB to write."""
    import json
    import re

    run = _run(tmp_path)
    _sql(run, "DELETE FROM transfers")
    with contextlib.closing(sqlite3.connect(run / "events.sqlite")) as c, c:
        c.executemany("INSERT INTO transfers VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                      [(100000 + i, 200000000 + i, 1, "h2d", "host", f"dev:{i}", 4096 + i, 0, 0, "x", 1, -1, 0)
                       for i in range(3000)])
    out = tmp_path / "m.html"
    r = cli("report", run, "-o", out)
    assert r.returncode == 0, r.stderr[-2000:]
    html = out.read_text()
    assert len(html) < 8 << 20, len(html)
    table = html.split('id="matrix-table"', 1)[1].split("</table>", 1)[0]
    assert table.count("<th>") == 1 + 2 * 64  # the corner, a header per column and one per row
    counts = [int(x) for x in re.findall(r'data-count="(\d+)"', table)]
    nbytes = [int(x) for x in re.findall(r'data-bytes="(\d+)"', table)]
    totals = json.loads(cli("audit", run, "--format", "json").stdout)["transfers"]["totals"]["h2d"]
    assert (sum(counts), sum(nbytes)) == (totals["count"], totals["bytes"]) == (3000, sum(4096 + i for i in range(3000)))


def test_op_device_labels_are_listed_once_each(tmp_path):
    """``suggest`` lists every device an op ran on: a list's ``not in`` made that quadratic in a
    crafted store's labels (14 ops of 5,000 devices each: 30.3 s, now 5.7 s for the whole
    suggest, by hand) and kept a label's repeated device twice."""
    from jaxplace_cli.analysis.run import open_run
    from jaxplace_cli.store.run_graph import suggest_op_devices

    run = _run(tmp_path)
    _sql(run, "UPDATE ops SET devices = 'cpu:3,cpu:1,cpu:3' WHERE rowid IN (SELECT MIN(rowid) FROM ops)")
    _sql(run, "UPDATE ops SET devices = 'cpu:1,cpu:2' WHERE rowid IN (SELECT MAX(rowid) FROM ops)")
    got = suggest_op_devices(open_run(run).store)
    assert len(got) == len(set(got)) and {"cpu:1", "cpu:2", "cpu:3"} <= set(got)
