"""Findings you can trust (issue 14): every seeded problem is found at its line, and the clean
twins get nothing to act on.

Two sources of runs:
* the golden runs (tests/data/golden_runs/<case>/, each dogfood case recorded with its own
  options), audited in-process: no recording, so the whole matrix costs a few seconds;
* fresh ``--devices 2`` (and ``--devices 4``) recordings of the scripts the dogfood runs on one
  device: the way a user tries them, and where idle-device used to fire on clean twins.

Expected (rule, line) sets are read off the scripts (their docstrings say what is seeded where).
``idle-device`` and ``imbalance`` over the whole program have no single line: 0.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import REPO, SAMPLES

GOLDEN = REPO / "tests" / "data" / "golden_runs"

# case -> every finding the audit must report, as (rule, severity, basename, line)
SEEDED = {
    "pingpong_eager": {("pingpong", "error", "pingpong_eager.py", 25)},
    "mlp_host_sync": {("implicit-h2d-in-loop", "warning", "mlp_host_sync.py", 42),
                      ("host-sync-in-loop", "warning", "mlp_host_sync.py", 43)},
    "uncommitted_mix": {("uncommitted-copy", "warning", "uncommitted_mix.py", 24)},
    "incompatible_devices": {("incompatible-devices", "error", "incompatible_devices.py", 32)},
    "fwd_bwd_split": {("fwd-bwd-split", "warning", "fwd_bwd_split.py", 34)},
    "recompile_shapes": {("recompile", "warning", "recompile_shapes.py", 27)},
    # 40 steps on cpu:0 (line 26), 2 on cpu:1, none on cpu:2: the script asked for 3 devices
    "imbalance_idle": {("imbalance", "warning", "imbalance_idle.py", 26),
                       ("idle-device", "warning", "", 0)},
    # placement scenarios: what each policy costs, pinned
    "placement_layers": {("pingpong", "error", "placement_layers.py", 17),
                         ("implicit-h2d-in-loop", "warning", "placement_layers.py", 14)},
    "placement_mixed_precision": {("pingpong", "error", "placement_mixed_precision.py", 15)},
    # (line 22 reads the 8 results once each, after the loop: 0 per step, no host-sync finding
    # since the rule measures reads per step, issue 13)
    "placement_trials": {("implicit-h2d-in-loop", "warning", "placement_trials.py", 18)},
    "placement_trials_rr_strict": {("pingpong", "error", "placement_trials.py", 20),
                                   ("implicit-h2d-in-loop", "warning", "placement_trials.py", 18)},
    "placement_families": set(),
}
CLEAN = sorted(p.stem for p in SAMPLES.glob("*_clean.py"))
HOST_SYNC_XFAIL = {"incompatible_devices_clean"}  # float(logits.sum()) 3 times: see below


def _audit(run_dir) -> list:
    from jaxplace_cli.analysis import audit_run
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.run import open_run

    run = open_run(run_dir)
    try:
        return audit_run(run, RuleConfig()).findings
    finally:
        run.store.close()


def _key(f) -> tuple:
    return (f.rule, f.severity, f.file.rsplit("/", 1)[-1] if f.file else "", f.line)


def _nothing_to_act_on(findings) -> list:
    """Findings a clean program must not get: any warning or error, and any info without a
    line to look at and a fix to apply."""
    return [_key(f) for f in findings if f.severity != "info" or not (f.file and f.line and f.fix)]


def test_every_sample_is_classified():
    from test_dogfood import CASES

    assert set(CASES) == set(SEEDED) | set(CLEAN) | set(ARTICLE_CASES)


@pytest.mark.parametrize("case", sorted(SEEDED))
def test_seeded_findings_at_their_lines(case):
    assert {_key(f) for f in _audit(GOLDEN / case)} == SEEDED[case]


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(
    strict=True, reason="host-sync measurement, worker C / issue 13")) if c in HOST_SYNC_XFAIL else c
    for c in CLEAN])
def test_clean_twin_has_nothing_to_act_on(case):
    findings = _audit(GOLDEN / case)
    assert _nothing_to_act_on(findings) == []
    assert findings == []  # and in fact nothing at all


def test_incompatible_devices_clean_idle_device_is_gone():
    # the part of that clean twin this issue owns: cpu:1 is idle because the script committed
    # everything to cpu:0 on purpose; no idle-device (it used to be an info finding)
    assert [f.rule for f in _audit(GOLDEN / "incompatible_devices_clean")] == ["host-sync-in-loop"]


# -- fresh recordings: the sample scripts as a user tries them, with more devices -------------

FRESH = {  # name -> (script, --devices)
    "mlp_clean@2": ("mlp_clean", 2),
    "recompile_clean@2": ("recompile_clean", 2),
    "mlp_host_sync@2": ("mlp_host_sync", 2),
    "placement_trials@4": ("placement_trials", 4),  # no policy: JAX puts it all on cpu:0
}


@pytest.fixture(scope="module")
def fresh(sample_run):
    def record(item):
        name, (script, devices) = item
        rec = sample_run(script, devices=devices)  # once per session (conftest.sample_run)
        assert rec.returncode == 0, rec.stderr[-2000:]
        return name, _audit(rec.run)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(record, FRESH.items()))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_clean@2", "recompile_clean@2"])
def test_clean_twins_on_a_two_device_machine(fresh, name):
    # one dependent training loop: the second device has nothing it could do
    assert fresh[name] == []


def _as_loader(expected: set) -> set:
    """A fresh recording knows which host array each upload carried (issue 26): a new array
    per call is a loader's upload, an info; the golden runs were recorded before."""
    return {(r, "info", f, n) if r == "implicit-h2d-in-loop" else (r, sev, f, n) for r, sev, f, n in expected}


@pytest.mark.slow
def test_seeded_findings_unchanged_by_an_extra_device(fresh):
    assert {_key(f) for f in fresh["mlp_host_sync@2"]} == _as_loader(SEEDED["mlp_host_sync"])


@pytest.mark.slow
def test_idle_devices_with_independent_work_are_an_info_with_a_fix(fresh):
    # 8 trials (line 17), each 4 update() calls (line 20) on its own data: 8 independent
    # chains of 4 calls, all on cpu:0 because nothing chose a device; cpu:1-3 ran nothing
    by_rule = {f.rule: f for f in fresh["placement_trials@4"]}
    idle = by_rule.pop("idle-device")
    assert {_key(f) for f in by_rule.values()} == _as_loader(SEEDED["placement_trials"])
    assert _key(idle) == ("idle-device", "info", "placement_trials.py", 20)
    assert idle.devices == ["cpu:1", "cpu:2", "cpu:3"] and idle.count == 3
    assert "the 32 calls of jit(<lambda>) form 8 independent chains" in idle.message
    assert "--policy rr" in idle.fix


# The article's scripts (sample_scripts/article_*.py): each places its ops with its own policy.
# Two of the article's policies bounce data between devices by design, and the audit says so.
ARTICLE_CASES = {
    # b returns to the transpose device: a.T on cpu:1 -> a @ a.T on cpu:0 -> b.T on cpu:1
    "article_custom_placement": {("pingpong", "error", "article_custom_placement.py", 40)},
    "article_round_robin": set(),
    "article_mixed_precision": set(),
    "article_check_placement": set(),
    # the signal leaves the host-role device (conv, scan) and comes back for tanh
    "article_hetero_placement": {("pingpong", "error", "article_hetero_placement.py", 39)},
}


@pytest.mark.parametrize("case", sorted(ARTICLE_CASES))
def test_article_scripts_findings_at_their_lines(case):
    assert {_key(f) for f in _audit(GOLDEN / case)} == ARTICLE_CASES[case]
