"""`report`, `export` and `view` on a `jaxplace launch` job directory (issue 23), and the one
audit entry point (``analysis.audit.Audit``) they share with `audit` and `diff`.

One real 2-process launch (tests/scripts/distributed/spmd_step.py, as in test_distributed.py);
the commands then run in-process through ``main([...])``. Expected numbers, by hand from the
script (see test_distributed.py): each process makes 16 h2d legs of at least 1 KiB, 32,768 B
(STEPS x L device_put of 2,048 B + STEPS batch uploads of 4,096 B, each one leg of 2,048 B per
device, as JAX's transfer guard counts: issue 24); the job 32, 64 KiB.
"""
from __future__ import annotations

import gzip
import json
import signal

import jsonschema
import pytest
from conftest import REPO, SCRIPTS, jaxplace

N, L, STEPS = 2, 2, 4
H2D_PER_PROCESS, H2D_BYTES_PER_PROCESS = STEPS * L + STEPS * L, STEPS * L * 2048 + STEPS * 4096


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("jobrep") / "job"
    proc = jaxplace("launch", "-n", N, "--devices-per-process", L, "--out", out,
                    SCRIPTS / "distributed" / "spmd_step.py", "--steps", STEPS, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out


def cli(capsys, *args) -> tuple[int, str, str]:
    from jaxplace_cli.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    got = capsys.readouterr()
    return exit_.value.code or 0, got.out, got.err


def test_report_of_a_job_is_one_page_of_the_merged_audit(job, tmp_path, capsys):
    page = tmp_path / "job.html"
    code, _, err = cli(capsys, "report", job, "-o", page)
    assert code == 0, err
    text = page.read_text()
    total = N * H2D_PER_PROCESS
    assert f"h2d {total} (64.0 KiB)" in text  # the verdict's transfer line: the job's sum
    assert "Processes (2)" in text and ">p0<" in text and ">p1<" in text
    for i in range(N):
        assert f"{job}/proc-{i}" in text
    assert "jax.distributed job" in text  # the timeline section says where each process's is
    # `audit -o x.html` writes the page through the same entry point
    code, _, err = cli(capsys, "audit", job, "-o", tmp_path / "audit.html")
    assert code == 0, err
    assert "Processes (2)" in (tmp_path / "audit.html").read_text()


def test_export_of_a_job_holds_every_process(job, tmp_path, capsys):
    out = tmp_path / "job.json.gz"
    code, _, err = cli(capsys, "export", job, "--perfetto", out)
    assert code == 0, err
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "p0 host" in names.values() and "p1 host" in names.values()
    assert len(names) == len(set(names.values()))  # no two processes share a pid
    owner = {pid: name.split(" ")[0] for pid, name in names.items()}
    # every transfer's flow starts and ends inside one process of the job, ids never shared
    starts = {e["id"]: e["pid"] for e in events if e["ph"] == "s"}
    ends = {e["id"]: e["pid"] for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    assert all(owner[starts[i]] == owner[ends[i]] for i in starts)
    big_h2d = [e for e in events if e["ph"] == "X" and e.get("cat") == "transfer"
               and e["args"]["kind"] == "h2d" and e["args"]["bytes"] >= 1024 and e["pid"] == _pid(e, names, "src")]
    for p in ("p0", "p1"):
        mine = [e for e in big_h2d if owner[e["pid"]] == p]
        assert len(mine) == H2D_PER_PROCESS and sum(e["args"]["bytes"] for e in mine) == H2D_BYTES_PER_PROCESS


def _pid(event, names, end) -> int:
    """The pid of a transfer slice's ``end`` lane (src or dst) within the slice's process."""
    prefix = names[event["pid"]].split(" ")[0]
    return next(pid for pid, name in names.items() if name == f"{prefix} {event['args'][end]}")


def test_export_of_a_job_is_its_processes_exports_side_by_side(job, tmp_path, capsys):
    """Process 0 comes first: its events are the events of `export JOB/proc-0`, its lanes
    named with a ``p0`` prefix."""
    code, _, err = cli(capsys, "export", job, "--perfetto", tmp_path / "job.json")
    assert code == 0, err
    code, _, err = cli(capsys, "export", job / "proc-0", "--perfetto", tmp_path / "p0.json")
    assert code == 0, err
    whole = json.loads((tmp_path / "job.json").read_text())["traceEvents"]
    alone = json.loads((tmp_path / "p0.json").read_text())["traceEvents"]
    for e in alone:
        if e.get("name") == "process_name":
            e["args"]["name"] = "p0 " + e["args"]["name"]
    assert whole[:len(alone)] == alone


def test_view_of_a_job_serves_every_process_trace(job):
    sessions = sorted(f"{p.parents[2].name}/{p.name}" for p in job.glob("proc-*/plugins/profile/*"))
    assert len(sessions) == N
    from test_view import _get, start_view

    proc, url = start_view(job)
    try:
        status, body = _get(url + "data/plugin/profile/runs")
        assert status == 200 and sorted(json.loads(body)) == sessions
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_one_entry_point_for_a_run_a_job_and_a_trace(job):
    from jaxplace_cli.analysis.audit import JOB, RUN, TRACE, Audit
    from jaxplace_cli.analysis.run import InputError

    a = Audit(job)
    assert a.kind == JOB and a.result() is a.result()  # audited once
    assert a.timeline() is None and [label for label, _, _ in a.timelines()] == ["p0", "p1"]
    assert a.document()["transfers"]["totals"]["h2d"] == {"count": N * H2D_PER_PROCESS,
                                                         "bytes": N * H2D_BYTES_PER_PROCESS}
    run = Audit(job / "proc-1")
    assert run.kind == RUN and run.result().summary.totals["h2d"].count == H2D_PER_PROCESS
    assert run.timeline().detail.complete
    trace = next(job.glob("proc-0/plugins/profile/*/*.xplane.pb"))
    assert Audit(trace).kind == TRACE and Audit(trace).timelines() == []
    with pytest.raises(InputError):
        Audit(job / "nowhere")


def test_a_store_damaged_past_its_header_is_one_store_error(tmp_path):
    """``store.reader.reading``: SQLite's errors, wherever a query meets them, become the one
    StoreError line naming the run."""
    import sqlite3

    from jaxplace_cli.store.reader import StoreError, reading

    with pytest.raises(StoreError, match=r"^RUN: the events store is corrupt or unreadable \(file is not a database\)$"):
        with reading("RUN"):
            raise sqlite3.DatabaseError("file is not a database")


def test_a_jobs_memory_is_each_processs_devices(job, capsys):
    """Issue 27, item 7: the merged audit lists every process's devices, each once, marked with
    its process, exactly as that process's own audit has it (a device's seqs are its
    process's: nothing is summed across processes). By hand: each process owns L = 2 devices,
    and at exit each holds at least the replicated w (128 float32: 512 B) and that process's
    rows of the last step's x and y (ROWS_PER_DEVICE x 128 float32: 2,048 B each)."""
    code, out, err = cli(capsys, "audit", job, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads((REPO / "docs" / "audit-json-schema.json").read_text()))
    merged = doc["memory"]
    assert merged["source"] == "tracked" and merged["failed_allocations"] == []
    for i in range(N):
        code, out, err = cli(capsys, "audit", job / f"proc-{i}", "--format", "json")
        assert code == 0, err
        own = json.loads(out)["memory"]["devices"]
        assert len(own) == L
        assert [d for d in merged["devices"] if d["process"] == i] == [dict(d, process=i) for d in own]
        assert all(d["end_bytes"] >= 512 + 2 * 2048 for d in own), own
    assert len(merged["devices"]) == N * L
    code, out, err = cli(capsys, "audit", job, "--format", "text")
    assert code == 0 and "Device memory" in out and "p1 " in out, err


def test_job_report_has_a_lane_group_per_process_in_chromium(job, tmp_path, capsys):
    """Issue 28 item 3: the job's page draws every process's timeline, a lane group each
    (``data-process``) with its devices and its own verdict, and the job's merged findings;
    offline and clean in a real Chromium."""
    from browser import Browser, find_chromium

    exe, why = find_chromium()
    if exe is None:
        pytest.skip(f"no headless Chromium: {why}")
    page_file = tmp_path / "job.html"
    code, _, err = cli(capsys, "report", job, "-o", page_file)
    assert code == 0, err
    code, out, err = cli(capsys, "audit", job, "--format", "json")
    merged = json.loads(out)["findings"]
    url = page_file.resolve().as_uri()
    with Browser(exe) as b:
        page = b.open(url)
        assert page.problems() == [] and page.requests() == [url]
        groups = page.eval("[...document.querySelectorAll('#process-groups [data-process]')].map(e => "
                           "[e.dataset.process, e.dataset.lanes.split(',').map(Number), e.textContent])")
        assert [g[0] for g in groups] == [f"p{i}" for i in range(N)]
        lanes = page.eval("JSON.parse(document.getElementById('jaxplace-data').textContent).timeline.lanes")
        for label, idx, text in groups:
            names = [lanes[i] for i in idx]
            assert names[0] == f"{label} host" and all(n.startswith(label + " cpu:") for n in names[1:])
            assert len(names) >= 1 + L and ("no findings" in text or "finding" in text)
        assert page.eval("document.getElementById('timeline-box').dataset.lanes") == str(len(lanes))
        assert page.eval("document.querySelector('#findings h2').textContent") == f"Findings ({len(merged)})"
        assert int(page.eval("document.getElementById('timeline').dataset.endNs")) > 0
        assert page.problems() == []
