"""`jaxplace export RUN --perfetto` (issue 16): Chrome trace event JSON that Perfetto and
chrome://tracing open. A checker of the format's rules the viewers rely on: every event well
formed, slices on one thread nest, every flow has both ends and each end sits in a slice of
its thread (else the viewer drops the arrow)."""
from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict

import pytest
from conftest import SCRIPTS, audit_json, cli, jaxplace

STEPS = 4  # tests/scripts/visual_train.py: 6 ops, 7 transfers (5 h2d, 1 d2d, 1 d2h)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("perfetto") / "run"
    proc = jaxplace("run", "--devices", "2", "--no-trace", "--out", out, SCRIPTS / "visual_train.py")
    assert proc.returncode == 0, proc.stderr
    return out


def check_chrome_trace(doc: dict) -> list[str]:
    """Problems with a Chrome trace event document (empty: none)."""
    problems = []
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    slices = defaultdict(list)
    flows = defaultdict(list)
    for i, e in enumerate(events):
        ph = e.get("ph")
        if ph not in ("M", "X", "i", "s", "f", "t", "C"):
            problems.append(f"event {i}: phase {ph!r}")
            continue
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int) or not isinstance(e.get("name"), str):
            problems.append(f"event {i}: pid/tid/name missing")
        if ph != "M" and not (isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0):
            problems.append(f"event {i}: bad ts")
        if ph == "X":
            if not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
                problems.append(f"event {i}: bad dur")
            a = round(e["ts"] * 1000)  # in integer ns, as Perfetto reads µs
            slices[(e["pid"], e["tid"])].append((a, a + round(e["dur"] * 1000)))
        elif ph in ("s", "f", "t"):
            flows[e.get("id")].append(e)
        elif ph == "C" and not (isinstance(e.get("args"), dict) and e["args"]
                                and all(isinstance(v, (int, float)) for v in e["args"].values())):
            problems.append(f"event {i}: a counter without numeric args")  # device memory (issue 27)
        elif ph == "i" and e.get("s") not in ("g", "p", "t"):
            problems.append(f"event {i}: instant scope {e.get('s')!r}")
    for key, spans in slices.items():  # slices on one thread nest or follow each other
        stack = []
        for a, b in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= a:
                stack.pop()
            if stack and b > stack[-1]:
                problems.append(f"thread {key}: slice {a}-{b} overlaps its parent's end {stack[-1]}")
            stack.append(b)
    # a slice encloses ts iff among the slices starting at or before ts one ends at or after it:
    # sorted starts and a running maximum of ends answer that by bisection (1M-event exports)
    index = {}
    for key, spans in slices.items():
        spans.sort()
        ends, top = [], -1
        for _, b in spans:
            top = max(top, b)
            ends.append(top)
        index[key] = ([a for a, _ in spans], ends)
    for fid, ends in flows.items():
        phases = sorted(e["ph"] for e in ends)
        if phases != ["f", "s"]:
            problems.append(f"flow {fid}: ends {phases} (want one s and one f)")
            continue
        for e in ends:  # each end binds to a slice of its own thread that encloses it
            starts, reach = index.get((e["pid"], e["tid"]), ([], []))
            i = bisect.bisect_right(starts, round(e["ts"] * 1000)) - 1
            if i < 0 or reach[i] < round(e["ts"] * 1000):
                problems.append(f"flow {fid}: its {e['ph']} end at {e['ts']} is in no slice of {e['pid']}/{e['tid']}")
    return problems


def test_export_perfetto(run_dir, tmp_path):
    out = tmp_path / "trace.json.gz"
    proc = cli("export", run_dir, "--perfetto", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert check_chrome_trace(doc) == []
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs.values()) == ["cpu:0", "cpu:1", "host"]  # a process per device, and the host
    by = {name: pid for pid, name in procs.items()}
    ops = [e for e in ev if e["ph"] == "X" and e["cat"] == "op"]
    assert len(ops) == 6 == audit_json(run_dir)["ops"]["total"]
    assert sorted(procs[e["pid"]] for e in ops) == ["cpu:0"] * 5 + ["cpu:1"]  # 4 steps + a put on each
    starts = [e for e in ev if e["ph"] == "s"]
    assert len(starts) == 7
    routes = sorted((procs[s["pid"]], procs[f["pid"]]) for s in starts
                    for f in ev if f["ph"] == "f" and f["id"] == s["id"])
    assert routes == [("cpu:0", "cpu:1"), ("cpu:1", "host")] + [("host", "cpu:0")] * 5
    steps = [e for e in ev if e["ph"] == "X" and e["cat"] == "step"]
    assert len(steps) == STEPS and {e["pid"] for e in steps} == {by["host"]}
    found = [e for e in ev if e["ph"] == "i" and e["cat"] == "finding"]
    uploads = [e for e in found if e["name"].endswith("implicit-h2d-in-loop")]
    assert len(uploads) == STEPS and {e["pid"] for e in uploads} == {by["cpu:0"]}  # at each moment


def test_checker_catches_a_flow_without_its_end():
    doc = {"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 0, "ts": 0, "dur": 1},
                           {"ph": "s", "id": 1, "name": "t", "pid": 1, "tid": 0, "ts": 0.5}]}
    assert check_chrome_trace(doc) == ["flow 1: ends ['s'] (want one s and one f)"]
    doc["traceEvents"].append({"ph": "f", "bp": "e", "id": 1, "name": "t", "pid": 2, "tid": 0, "ts": 0.5})
    assert check_chrome_trace(doc) == ["flow 1: its f end at 0.5 is in no slice of 2/0"]


def test_export_needs_a_target(run_dir):
    proc = cli("export", run_dir)
    assert proc.returncode == 2 and proc.stderr.startswith("jaxplace: error: say what to export")
