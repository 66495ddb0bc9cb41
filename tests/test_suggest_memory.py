"""`suggest --memory-limit` (issue 27 item 6) on a hand-written 2-device script whose numbers
are computed by hand (tests/scripts/memory/limit.py; 1 MiB = a 1024 x 256 float32 array):

- recorded: everything on cpu:0; live there 1 MiB (a), 2 MiB (a, b), 1 MiB (b, a freed), 2 MiB
  (b, c), 3 MiB (b, c, d): peak 3 MiB after line 12; cpu:1 holds nothing;
- a limit of 2 MiB: c (line 11) or d (line 12) reads nothing, so either goes to cpu:1 at no
  transfer cost: cpu:0 peaks at 2 MiB, cpu:1 at 1 MiB;
- no placement peaks below 2 MiB: b, c and d are live together at the end, so one of the two
  devices holds two of them; any limit under 2 MiB is refused (exit 2), as is a pair of
  limits whose sum is under the 3 MiB live at the end.

One recording (``sample_run``) and one re-run (``--verify``); the rest runs in this process.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO, audit_json, cli

from jaxplace_cli.suggest.memory_limit import UNLIMITED, parse_limits

SCRIPT = REPO / "tests" / "scripts" / "memory" / "limit.py"
MIB = 1 << 20


@pytest.fixture(scope="module")
def run(sample_run):
    rec = sample_run(SCRIPT, devices=2)
    assert rec.returncode == 0, rec.stderr
    return rec.run


def _suggest(run, *args):
    proc = cli("suggest", run, "--format", "json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _peaks(doc, key):
    return {d["device"]: d[key] for d in doc["memory"]["devices"]}


def test_the_model_of_the_recorded_placement_is_the_audits_peak(run):
    doc = _suggest(run)
    assert _peaks(doc, "recorded_peak_bytes") == {"cpu:0": 3 * MIB, "cpu:1": 0}
    assert _peaks(doc, "predicted_peak_bytes") == {"cpu:0": 3 * MIB, "cpu:1": 0}  # nothing to move
    assert doc["memory"]["limited"] is False and doc["moved"] == 0
    audit = {d["device"]: d["peak_bytes"] for d in audit_json(run)["memory"]["devices"]}
    assert audit == {"cpu:0": 3 * MIB}


@pytest.mark.parametrize("limit, limits", [("2MiB", {"cpu:0": 2 * MIB, "cpu:1": 2 * MIB}),
                                           ("cpu:0=2MiB", {"cpu:0": 2 * MIB, "cpu:1": None})])
def test_a_limit_moves_one_free_group_and_nothing_more(run, limit, limits):
    doc = _suggest(run, "--memory-limit", limit)
    assert _peaks(doc, "predicted_peak_bytes") == {"cpu:0": 2 * MIB, "cpu:1": MIB}
    assert _peaks(doc, "limit_bytes") == limits
    assert doc["memory"]["limited"] is True and doc["memory"]["groups_moved"] == 1
    assert doc["predicted"]["totals"]["d2d"] == {"count": 0, "bytes": 0}  # c and d read nothing
    assert doc["moved"] == 1 and not doc["solver"]["optimal"]
    rules = doc["policy"]["rules"]
    assert len(rules) == 1 and rules[0]["device"] == "cpu:1"
    assert rules[0]["site"].endswith("limit.py:11") or rules[0]["site"].endswith("limit.py:12")


def test_a_limit_the_recorded_placement_meets_moves_nothing(run):
    # the sum of everything cpu:0 ever held is 4 MiB, but only 3 MiB is live at once
    doc = _suggest(run, "--memory-limit", "cpu:0=3MiB,cpu:1=512KiB")
    assert doc["moved"] == 0 and doc["memory"]["groups_moved"] == 0
    assert _peaks(doc, "predicted_peak_bytes") == {"cpu:0": 3 * MIB, "cpu:1": 0}


def test_the_text_says_the_peak_per_device_and_the_limit(run):
    proc = cli("suggest", run, "--memory-limit", "2MiB")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "  device  peak, model of recorded  peak, suggested    limit" in lines
    assert "  cpu:0                   3.0 MiB          2.0 MiB  2.0 MiB" in lines
    assert "  cpu:1                       0 B          1.0 MiB  2.0 MiB" in lines
    assert "  every device fits its limit (1 site/op group(s) moved for it)" in lines


@pytest.mark.parametrize("limit, says", [
    ("1.5MiB", "limit.py:12 (full) 3 arrays larger than half of 1.5 MiB are live at once"),
    (str(2 * MIB - 1), "3 arrays larger than half of"),  # one byte under the smallest possible peak
    ("cpu:0=1MiB,cpu:1=1MiB", "3.0 MiB of arrays are live at once at"),
])
def test_a_limit_below_the_smallest_possible_peak_is_refused(run, limit, says):
    proc = cli("suggest", run, "--memory-limit", limit)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("jaxplace: error: no placement fits --memory-limit:") and says in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("args, says", [
    (["--memory-limit", "cpu:7=1MiB"], "--memory-limit: device cpu:7 is not in this run"),
    (["--memory-limit", "lots"], "--memory-limit: not a size: 'lots'"),
    (["--memory-limit", "cpu:0"], "--memory-limit: not a size"),
    (["--memory-limit", "2MiB", "--objective", "makespan"], "--memory-limit works with --objective transfers or total"),
])
def test_bad_limits_are_one_line_exit_2(run, args, says):
    proc = cli("suggest", run, *args)
    assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_parse_limits():
    devs = ("cpu:0", "cpu:1", "cpu:2")
    assert parse_limits("4GiB", devs).tolist() == [4 << 30] * 3
    assert parse_limits(" cpu:2 = 1 MiB ,cpu:0=10", devs).tolist() == [10, UNLIMITED, MIB]
    with pytest.raises(ValueError, match="is not DEVICE=SIZE"):
        parse_limits("cpu:0=1MiB,=2", devs)
    assert isinstance(parse_limits("1", devs), np.ndarray)


def test_verify_measures_each_devices_peak(run, tmp_path):
    """The one re-run: under the suggested policy the re-run's audit peaks are the predicted ones."""
    proc = cli("suggest", run, "--memory-limit", "2MiB", "-o", tmp_path / "p.toml", "--verify", SCRIPT,
               "--verify-out", tmp_path / "replay", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    v = json.loads(proc.stdout)["verification"]
    assert v["ok"] and v["match"] and v["script_stdout"] == "ok\n", v
    assert v["memory"] == [
        {"device": "cpu:0", "predicted_peak_bytes": 2 * MIB, "measured_peak_bytes": 2 * MIB,
         "limit_bytes": 2 * MIB, "verdict": "ok"},
        {"device": "cpu:1", "predicted_peak_bytes": MIB, "measured_peak_bytes": MIB,
         "limit_bytes": 2 * MIB, "verdict": "ok"}]
    audit = {d["device"]: d["peak_bytes"] for d in audit_json(tmp_path / "replay")["memory"]["devices"]}
    assert audit == {"cpu:0": 2 * MIB, "cpu:1": MIB}


def test_the_repair_pays_no_transfer_it_need_not(run):
    """cpu:0 under 1 MiB: a and b (line 9 reads a) must leave it together, at no transfer
    cost; moving b alone would copy a (1 MiB d2d). One of c and d may stay on cpu:0."""
    doc = _suggest(run, "--memory-limit", "cpu:0=1MiB")
    assert _peaks(doc, "predicted_peak_bytes")["cpu:0"] <= MIB
    assert doc["predicted"]["totals"]["d2d"] == {"count": 0, "bytes": 0}
    assert doc["solver"]["cost"] == 0


def test_verify_verdicts_on_a_measured_run(run):
    """``memory_rows`` against a run measured as the recorded one (cpu:0 3 MiB, cpu:1 0 B):
    within 1 % is ok, beyond is DIFFERENT, a measured peak over the limit is OVER LIMIT."""
    from dataclasses import replace

    from jaxplace_cli.analysis.run import open_run
    from jaxplace_cli.suggest.plan import make_plan
    from jaxplace_cli.suggest.verify import memory_rows

    opened = open_run(run)
    plan = make_plan(opened)
    mem = plan.memory
    within = int(3 * MIB * 0.995)
    plan.memory = replace(mem, predicted=[within, 0])
    assert [r[4] for r in memory_rows(plan, opened)] == ["ok", "ok"]
    plan.memory = replace(mem, predicted=[int(3 * MIB * 0.98), 0])
    assert [r[4] for r in memory_rows(plan, opened)] == ["DIFFERENT", "ok"]
    plan.memory = replace(mem, predicted=[3 * MIB, 0], limit=[2 * MIB, UNLIMITED])
    assert memory_rows(plan, opened) == [("cpu:0", 3 * MIB, 3 * MIB, 2 * MIB, "OVER LIMIT"),
                                         ("cpu:1", 0, 0, None, "ok")]


def test_markdown_has_the_memory_table(run):
    proc = cli("suggest", run, "--memory-limit", "cpu:0=2MiB", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("## jaxplace suggest: `") and "### Device memory (predicted peak)" in lines
    assert "| cpu:0 | 3.0 MiB | 2.0 MiB | 2.0 MiB |" in lines and "| cpu:1 | 0 B | 1.0 MiB | none |" in lines
    assert "| d2d | 0 (0 B) | 0 (0 B) | 0 (0 B) |" in lines
    graph = cli("suggest", "--graph", REPO / "tests" / "data" / "placement_graphs" / "missing.json", "-f", "markdown")
    assert graph.returncode == 2 and "--format markdown is for a run's plan" in graph.stderr
