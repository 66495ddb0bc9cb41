"""The project dogfoods its CI gate (issue 5): every sample script runs under its budget from
audits/; the good ones pass (exit 0) and the deliberately bad ones fail (exit 1) for exactly
the reasons their budget names. A new sample script without a budget fails this file."""
import json

import pytest
from conftest import REPO, SAMPLES, cli

AUDITS = REPO / "audits"
POLICIES = SAMPLES / "policies"

# case -> (script, run options, expected budget breaches: the rule of each, none = passes)
CASES = {
    "mlp_clean": ("mlp_clean", ["--devices", "1"], set()),
    "mlp_host_sync": ("mlp_host_sync", ["--devices", "1"],
                      {"h2d.count_per_step", "d2h.count_per_step", "host_syncs_per_step"}),
    "pingpong_clean": ("pingpong_clean", ["--devices", "2"], set()),
    # 9 x 1 MiB d2d > 2 MiB; 8 ping-pong returns (the pingpong limit, not fail_on, judges them)
    "pingpong_eager": ("pingpong_eager", ["--devices", "2"], {"pingpong", "d2d.bytes"}),
    "uncommitted_copy_clean": ("uncommitted_copy_clean", ["--devices", "2"], set()),
    # 1 explicit + 10 silent copies > 2 d2d, and the uncommitted-copy warning
    "uncommitted_mix": ("uncommitted_mix", ["--devices", "2"], {"d2d.count", "fail_on.uncommitted-copy"}),
    "fwd_bwd_split_clean": ("fwd_bwd_split_clean", ["--devices", "2"], set()),
    "fwd_bwd_split": ("fwd_bwd_split", ["--devices", "2"], {"d2d.count", "fail_on.fwd-bwd-split"}),
    "imbalance_clean": ("imbalance_clean", ["--devices", "3"], set()),
    "imbalance_idle": ("imbalance_idle", ["--devices", "3"], {"fail_on.imbalance", "fail_on.idle-device"}),
    "incompatible_devices_clean": ("incompatible_devices_clean", ["--devices", "2"], set()),
    "incompatible_devices": ("incompatible_devices", ["--devices", "2"], {"fail_on.incompatible-devices"}),
    "recompile_clean": ("recompile_clean", ["--devices", "1"], set()),
    "recompile_shapes": ("recompile_shapes", ["--devices", "1"], {"recompiles"}),
    "placement_trials": ("placement_trials", ["--devices", "4", "--policy", "rr"], set()),
    # the same script and budget, every op moved to the next device
    "placement_trials_rr_strict": ("placement_trials", ["--devices", "4", "--policy", "rr-strict"],
                                   {"pingpong", "d2d.count"}),
    "placement_families": ("placement_families",
                           ["--devices", "4", "--policy", POLICIES / "matmul_transpose_rest.toml"], set()),
    "placement_layers": ("placement_layers",
                         ["--devices", "4", "--policy", f"{POLICIES / 'placers.py'}:layer_placer"], set()),
    "placement_mixed_precision": ("placement_mixed_precision",
                                  ["--devices", "4", "--policy", POLICIES / "mixed_precision.toml"], set()),
    # the article's snippets (issue 14): each places its ops in code with jax.device_placement
    "article_custom_placement": ("article_custom_placement", ["--devices", "3"], set()),
    "article_round_robin": ("article_round_robin", ["--devices", "2"], set()),
    "article_mixed_precision": ("article_mixed_precision", ["--devices", "2"], set()),
    "article_check_placement": ("article_check_placement", ["--devices", "2"], set()),
    "article_hetero_placement": ("article_hetero_placement", ["--devices", "3"], set()),
}
# the script's own failure, which `jaxplace run` must keep
SCRIPT_EXIT = {"incompatible_devices": 1}


def test_every_sample_script_has_a_budget_and_a_case():
    samples = {p.stem for p in SAMPLES.glob("*.py")}
    assert samples == {p.stem for p in AUDITS.glob("*.toml")}
    assert samples == {script for script, _, _ in CASES.values()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sample_under_its_budget(case, sample_run):
    script, options, expected = CASES[case]
    devices, options = options[1], options[2:]  # every case names --devices first
    rec = sample_run(script, *options, devices=devices)  # recorded once, shared with other files
    assert rec.returncode == SCRIPT_EXIT.get(case, 0), rec.stderr
    proc = cli("audit", rec.run, "--budget", AUDITS / f"{script}.toml", "--format", "json", cwd=REPO)
    report = json.loads(proc.stdout)
    breaches = report["budget"]["breaches"]
    assert {b["rule"] for b in breaches} == expected, [b["message"] for b in breaches]
    assert proc.returncode == (1 if expected else 0), proc.stderr
    assert report["budget"]["passed"] is (not expected)
    # the verdict also reaches the CI log, one line per breach
    assert [x for x in proc.stderr.splitlines() if x.startswith("jaxplace: budget: ")] == \
        [f"jaxplace: budget: {b['message']}" for b in breaches]
