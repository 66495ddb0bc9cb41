"""Device memory in the audit and budgets (issue 27), on one ``jaxplace run`` of the issue's
example (tests/scripts/memory/example.py, 2 devices): the audit JSON's ``memory`` object, the
``[memory]`` budget keys, their flags and the ``memory_budget`` keywords, and an old run."""
import json

import pytest
from conftest import REPO, cli

from jaxplace_cli.integrations.budget import limits_to_budget

pytest_plugins = ["pytester"]

EXAMPLE = REPO / "tests" / "scripts" / "memory" / "example.py"
OOM = REPO / "tests" / "scripts" / "memory" / "oom.py"
GOLDEN = REPO / "tests" / "data" / "golden_runs" / "mlp_clean"
MiB = 1 << 20


@pytest.fixture(scope="module")
def example_run(sample_run):
    rec = sample_run(EXAMPLE, devices=2)
    assert rec.returncode == 0, rec.stderr
    return rec.run


def audit(run, *extra) -> tuple[int, dict]:
    proc = cli("audit", run, "--format", "json", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_the_audit_carries_the_memory_object(example_run):
    _, doc = audit(example_run)
    at = [(str(EXAMPLE), n, "<module>") for n in (8, 9, 11, 12)]
    p, q, r, s = ({"file": f, "line": n, "function": fn} for f, n, fn in at)
    mem = doc["memory"]
    seqs = [d.pop("peak_seq") for d in mem["devices"]]
    assert seqs[0] < seqs[1]
    assert mem == {
        "source": "tracked",
        "devices": [
            {"device": "cpu:0", "peak_bytes": 2 * MiB, "peak_step": None, "end_bytes": MiB,
             "at_peak": [{**p, "bytes": MiB, "arrays": 1}, {**q, "bytes": MiB, "arrays": 1}]},
            {"device": "cpu:1", "peak_bytes": 5 * MiB, "peak_step": None, "end_bytes": MiB,
             "at_peak": [{**s, "bytes": 4 * MiB, "arrays": 1}, {**r, "bytes": MiB, "arrays": 1}]},
        ],
        "failed_allocations": [],
    }
    assert {"memory-growth", "replicated", "memory-imbalance"} <= set(doc["rules"]["checked"])
    assert not [f for f in doc["findings"] if f["rule"] in ("memory-growth", "replicated", "memory-imbalance")]


def test_a_run_before_memory_tracking_has_no_memory_key():
    _, doc = audit(GOLDEN)
    assert "memory" not in doc and "memory-growth" not in doc["rules"]["checked"]


def test_peak_per_device_breach_names_device_peak_and_line(example_run):
    code, doc = audit(example_run, "--max-peak-memory", "4MiB")
    assert code == 1
    (b,) = doc["budget"]["breaches"]
    assert (b["rule"], b["limit"], b["actual"], b["line"]) == ("memory.peak", 4 * MiB, 5 * MiB, 12)
    assert b["message"] == ("device memory was limited to 4.0 MiB per device but cpu:1 peaked at 5.0 MiB; "
                            "most held by example.py:12 (4.0 MiB)")
    assert audit(example_run, "--max-peak-memory", "5MiB")[0] == 0


def test_budget_file_memory_table(example_run, tmp_path):
    budget = tmp_path / "b.toml"
    # together: Q (1 MiB on cpu:0) + R and S (5 MiB on cpu:1) at S's line
    budget.write_text('[memory]\npeak = "9 MiB"\npeak_total = "5 MiB"\n')
    code, doc = audit(example_run, "--budget", budget)
    assert code == 1
    (b,) = doc["budget"]["breaches"]
    assert (b["rule"], b["actual"]) == ("memory.peak_total", 6 * MiB)
    assert b["message"] == ("device memory was limited to 5.0 MiB over all devices but all devices together "
                            "peaked at 6.0 MiB; most held by example.py:12 (4.0 MiB)")
    budget.write_text('[memory]\npeak = "9 MiB"\npeak_total = "6 MiB"\n')
    assert audit(example_run, "--budget", budget)[0] == 0
    budget.write_text('[memory]\npeek = "9 MiB"\n')
    proc = cli("audit", example_run, "--budget", budget)
    assert proc.returncode == 2
    assert "unknown key memory.'peek' (known: peak, peak_total, growth_per_step)" in proc.stderr


def test_growth_limit_needs_steps_and_old_runs_cannot_pass(example_run):
    code, doc = audit(example_run, "--max-memory-growth-per-step", "1KiB")
    assert code == 1 and doc["budget"]["breaches"][0]["actual"] == -1
    assert "no steps were detected" in doc["budget"]["breaches"][0]["message"]
    code, doc = audit(GOLDEN, "--max-peak-memory", "1GiB")
    assert code == 1
    assert "has no memory rows" in doc["budget"]["breaches"][0]["message"]


def test_the_memory_budget_keywords():
    b = limits_to_budget({"memory_peak": "9 MiB", "memory_growth_per_step": 0}, "marker")
    assert b.kinds == {"memory": {"peak": 9 * MiB, "growth_per_step": 0}}
    assert b.limit_names() == ["memory.peak", "memory.growth_per_step"]


def test_the_memory_budget_marker(pytester):
    pytester.makepyfile(test_mem="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.memory_budget(peak="1 MiB")
        def test_over():
            x = jnp.ones((1024, 512))  # 2 MiB
            y = x + 1

        @pytest.mark.memory_budget(peak="8 MiB")
        def test_under():
            x = jnp.ones((1024, 512))
    """)
    result = pytester.runpytest_subprocess("--jaxplace", "-p", "no:cacheprovider", "-q")  # in-process, its hooks would stay
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*device memory was limited to 1.0 MiB per device but cpu:0 peaked at 4.0 MiB*"])


def test_the_terminal_audit_has_a_device_memory_section(example_run):
    proc = cli("audit", example_run, "--format", "text", env={"COLUMNS": "160"})
    text = proc.stdout
    assert "Device memory (live jax.Arrays by line; XLA temporaries not counted)" in text
    rows = [x for x in text.splitlines() if x.startswith("│ cpu:")][-2:]
    assert [x.split("│")[1:5] for x in rows] == [
        [" cpu:0  ", " 2.0 MiB ", " seq " + rows[0].split("seq ")[1].split("│")[0], " 1.0 MiB "],
        [" cpu:1  ", " 5.0 MiB ", " seq " + rows[1].split("seq ")[1].split("│")[0], " 1.0 MiB "]]
    assert "memory/example.py:8 1.0 MiB, " in rows[0]
    assert "memory/example.py:12 4.0 MiB, tests/scripts/memory/example.py:11 1.0 MiB" in rows[1]


def test_out_of_memory_under_jaxplace_run(sample_run):
    """The script fails as under python (its traceback, exit 1); jaxplace adds its report to
    stderr and the audit names the line, device and requested bytes."""
    rec = sample_run(OOM, devices=1)
    assert rec.returncode == 1
    assert "RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes." in rec.stderr
    assert f"jaxplace: out of memory at {OOM}:5 on cpu:0: requested 4.0 TiB" in rec.stderr
    assert f"1.0 MiB  cpu:0    {OOM}:4  float32[1024,256]" in rec.stderr
    _, doc = audit(rec.run)
    assert doc["memory"]["failed_allocations"] == [{
        "file": str(OOM), "line": 5, "device": "cpu:0", "bytes": 4 << 40,
        "error": "RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes."}]
    text = cli("audit", rec.run, "--format", "text", env={"COLUMNS": "200"}).stdout
    assert "memory/oom.py:5 on cpu:0: requested 4.0 TiB" in text.replace("\n", "")
    assert "out of memory at " in text


def test_the_memory_object_follows_the_documented_schema(example_run):
    import jsonschema

    _, doc = audit(example_run)
    jsonschema.validate(doc, json.loads((REPO / "docs" / "audit-json-schema.json").read_text()))


def test_the_html_report_charts_live_bytes_per_device(example_run, tmp_path):
    from browser import Browser, find_chromium

    exe, why = find_chromium()
    if exe is None:
        pytest.skip(f"no headless Chromium: {why}")
    out = tmp_path / "report.html"
    proc = cli("report", example_run, "-o", out)
    assert proc.returncode == 0, proc.stderr
    with Browser(exe) as chromium:
        page = chromium.open(out.resolve().as_uri())
        assert page.problems() == []
        series = page.eval("[...document.querySelectorAll('#memory .mem-series')].map(s => "
                           "[s.dataset.device, +s.dataset.peak, +s.dataset.end, s.getBoundingClientRect().height > 0])")
        assert series == [["cpu:0", 2 * MiB, MiB, True], ["cpu:1", 5 * MiB, MiB, True]]
        peaks = page.eval("[...document.querySelectorAll('#memory .mem-peak')].map(c => [c.dataset.device, "
                          "+c.dataset.bytes, c.getBoundingClientRect().top, c.textContent])")
        assert [(d, b) for d, b, _, _ in peaks] == [("cpu:0", 2 * MiB), ("cpu:1", 5 * MiB)]
        assert peaks[1][2] < peaks[0][2]  # the larger peak is drawn higher
        assert peaks[1][3].endswith("example.py:12 4.0 MiB; example.py:11 1.0 MiB")


def test_perfetto_export_has_a_memory_counter_per_device(example_run, tmp_path):
    from test_export_perfetto import check_chrome_trace

    out = tmp_path / "trace.json"
    proc = cli("export", example_run, "--perfetto", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert check_chrome_trace(doc) == []
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    counters = {}
    for e in ev:
        if e["ph"] == "C":
            counters.setdefault(procs[e["pid"]], []).append(e["args"]["bytes"])
    # cpu:0: P, then Q, then P gone; cpu:1: R, then S, then S gone
    assert counters == {"cpu:0": [MiB, 2 * MiB, MiB], "cpu:1": [MiB, 5 * MiB, MiB]}
