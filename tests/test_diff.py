"""`jaxplace diff`: per-kind and per-site deltas between runs or a saved baseline."""
import json

import pytest

from conftest import SCRIPTS, jaxplace

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diff")
    a = SCRIPTS / "ground_truth_a.py"
    base, new = tmp / "base", tmp / "new"
    # base: the ground-truth chain with 4 iterations; new: the same script edited to 6
    edited = tmp / "ground_truth_a.py"
    edited.write_text(a.read_text().replace("range(4)", "range(6)"))
    for out, script in ((base, a), (new, edited)):
        proc = jaxplace("run", "-q", "--no-trace", "--devices", "2", "--out", out, script)
        assert proc.returncode == 0, proc.stderr
    saved = tmp / "baseline.json"
    saved.write_text(jaxplace("audit", base, "--format", "json").stdout)
    return base, new, saved


def test_diff_of_runs_and_of_a_saved_baseline_agree(two_runs):
    base, new, saved = two_runs
    d1 = json.loads(jaxplace("diff", base, new, "--format", "json").stdout)
    d2 = json.loads(jaxplace("diff", saved, new, "--format", "json").stdout)
    assert d1["kinds"] == d2["kinds"]
    # d2d: 1 + 4x2 = 9 MiB before, 1 + 6x2 = 13 MiB after
    assert d1["kinds"]["d2d"]["base"] == {"count": 9, "bytes": 9 * MiB}
    assert d1["kinds"]["d2d"]["new"] == {"count": 13, "bytes": 13 * MiB}
    assert d1["kinds"]["d2d"]["bytes_pct"] == pytest.approx(100 * 4 / 9)
    loop = [s for s in d1["sites"] if s["site"] == "ground_truth_a.py:10 d2d jax.device_put"]
    assert loop == [{"site": "ground_truth_a.py:10 d2d jax.device_put", "status": "changed",
                     "base": {"count": 8, "bytes": 8 * MiB}, "new": {"count": 12, "bytes": 12 * MiB}}]


def test_fail_on_increase(two_runs):
    base, new, _ = two_runs
    proc = jaxplace("diff", base, new, "--fail-on-increase", "50")
    assert proc.returncode == 0  # +44.4% d2d
    proc = jaxplace("diff", base, new, "--fail-on-increase", "40")
    assert proc.returncode == 1
    assert "d2d bytes grew +44.4% (9,437,184 -> 13,631,488), more than the allowed 40%" in proc.stderr


def test_diff_bad_input(two_runs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 7}')
    proc = jaxplace("diff", bad, two_runs[1])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
