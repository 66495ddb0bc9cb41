"""`jaxplace diff`: per-kind and per-site deltas between runs or a saved baseline."""
import json

import pytest
from conftest import SCRIPTS, cli, jaxplace

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
    saved.write_text(cli("audit", base, "--format", "json").stdout)
    return base, new, saved


def test_diff_of_runs_and_of_a_saved_baseline_agree(two_runs):
    base, new, saved = two_runs
    d1 = json.loads(cli("diff", base, new, "--format", "json").stdout)
    d2 = json.loads(cli("diff", saved, new, "--format", "json").stdout)
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
    proc = cli("diff", base, new, "--fail-on-increase", "50")
    assert proc.returncode == 0  # +44.4% d2d
    proc = cli("diff", base, new, "--fail-on-increase", "40")
    assert proc.returncode == 1
    assert "d2d bytes grew +44.4% (9,437,184 -> 13,631,488), more than the allowed 40%" in proc.stderr


def test_diff_bad_input(two_runs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 7}')
    proc = cli("diff", bad, two_runs[1])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_a_baseline_of_top_sites_only_does_not_invent_new_sites(two_runs, tmp_path):
    base, new, _ = two_runs
    top1 = tmp_path / "top1.json"
    top1.write_text(cli("audit", base, "--format", "json", "--top", "1").stdout)
    d = json.loads(cli("diff", top1, base, "--format", "json").stdout)
    # ground_truth_a has 4 sites >= 1 KiB (lines 7, 8, 10, 11); the baseline lists only line 10's
    statuses = {s["site"].split(" ")[0]: s["status"] for s in d["sites"]}
    assert statuses == {"ground_truth_a.py:10": "same", "ground_truth_a.py:7": "unlisted",
                        "ground_truth_a.py:8": "unlisted", "ground_truth_a.py:11": "unlisted"}
    assert len(d["notes"]) == 1 and "lists only its top 1 transfer sites" in d["notes"][0]


def test_diff_formats_for_ci(two_runs, tmp_path):
    from junitparser import Failure, JUnitXml

    base, new, _ = two_runs
    out = tmp_path / "diff.xml"
    proc = cli("diff", base, new, "--fail-on-increase", "40", "-o", out)
    assert proc.returncode == 1 and not proc.stdout
    suite = JUnitXml.fromfile(str(out))
    cases = {c.name: c for s in ([suite] if suite._tag == "testsuite" else suite) for c in s}
    assert set(cases) == {"diff.h2d", "diff.d2h", "diff.d2d"}
    (fail,) = [r for r in cases["diff.d2d"].result if isinstance(r, Failure)]
    assert fail.message.startswith("d2d bytes grew +44.4%")
    assert not any(isinstance(r, Failure) for r in cases["diff.h2d"].result)
    gh = cli("diff", base, new, "--format", "github", "--fail-on-increase", "40")
    lines = gh.stdout.splitlines()
    # the loop's device_put (line 10) grew from 8 to 12 transfers: a warning on that line
    assert any(x.startswith("::warning file=") and ",line=10::jaxplace diff: transfers grew: "
               "ground_truth_a.py:10 d2d jax.device_put: 8 -> 12 transfers" in x for x in lines), lines
    # 9 -> 13 transfers and 9 -> 13 MiB: both +44.4% > 40% ('%' escaped as %25 for GitHub)
    assert [x for x in lines if x.startswith("::error")] == [
        "::error::jaxplace diff: d2d bytes grew +44.4%25 (9,437,184 -> 13,631,488), more than the allowed 40%25",
        "::error::jaxplace diff: d2d transfers grew +44.4%25 (9 -> 13), more than the allowed 40%25"]
    md = cli("diff", base, new, "--format", "markdown")
    assert md.returncode == 0 and "| d2d | 9 → 13 | 9.0 MiB → 13.0 MiB | +44.4% |" in md.stdout
