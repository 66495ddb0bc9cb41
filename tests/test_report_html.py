"""The HTML report (issue 16) in a real headless Chromium: loads with no console error and no
network request, one lane per device plus the host, its matrix totals equal the audit JSON's,
hovering and clicking a finding selects its moments, the timeline's screenshot is not blank;
the level of detail of a big run; input text never becomes markup."""
from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from browser import png_pixels
from conftest import SCRIPTS, audit_json, cli, jaxplace

STEPS = 4  # tests/scripts/visual_train.py
MIB4 = 256 * 256 * 4  # one 256x256 float32 array: 256 KiB


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("visual") / "run"
    proc = jaxplace("run", "--devices", "2", "--out", out, SCRIPTS / "visual_train.py")
    assert proc.returncode == 0, proc.stderr
    return out


def _report(run_dir, out, *extra):
    proc = cli("report", run_dir, "-o", out, *extra)
    assert proc.returncode == 0, proc.stderr
    assert f"report written to {out}" in proc.stderr
    return out


def test_report_in_chromium(run_dir, chromium, tmp_path):
    page_file = _report(run_dir, tmp_path / "report.html")
    url = page_file.resolve().as_uri()
    page = chromium.open(url)
    assert page.problems() == []
    assert page.requests() == [url]  # the page itself, nothing else
    # one lane per device, plus the host
    assert page.eval("JSON.parse(document.getElementById('jaxplace-data').textContent).timeline.lanes") == \
        ["host", "cpu:0", "cpu:1"]
    assert page.eval("document.getElementById('timeline-box').dataset.lanes") == "3"
    # the matrix's totals, read back from the page, are the audit JSON's (and the hand count)
    audit = audit_json(run_dir)
    rows = page.eval("[...document.querySelectorAll('#matrix-totals tr[data-kind]')].map(r => [r.dataset.kind, "
                     "+r.dataset.count, +r.dataset.bytes, +r.dataset.smallCount, +r.dataset.smallBytes])")
    assert {k: (c, b) for k, c, b, _, _ in rows} == {k: (v["count"], v["bytes"]) for k, v in audit["transfers"]["totals"].items()}
    assert {k: (c, b) for k, _, _, c, b in rows} == {k: (v["count"], v["bytes"]) for k, v in audit["transfers"]["small"].items()}
    assert {k: (c, b) for k, c, b, _, _ in rows}["h2d"] == (1 + STEPS, (1 + STEPS) * MIB4)
    cells = page.eval("[...document.querySelectorAll('#matrix-table td.cell')].map(c => [c.dataset.src, c.dataset.dst, "
                      "+c.dataset.count, +c.dataset.bytes])")
    assert sorted(map(tuple, cells)) == [("cpu:0", "cpu:1", 1, MIB4), ("cpu:1", "host", 1, MIB4),
                                         ("host", "cpu:0", 1 + STEPS, (1 + STEPS) * MIB4)]
    # the implicit upload finding (an info: a new array each step, issue 26): hovering selects
    # its STEPS moments, leaving unselects them, clicking pins them and zooms the timeline to them
    key = page.eval("document.querySelector('.finding.sev-info').dataset.moment")
    box = "document.getElementById('timeline-box').dataset.selected"
    before = page.eval("document.getElementById('view-range').textContent")
    x, y = page.center_of(f'[data-moment="{key}"]')
    page.mouse("mouseMoved", x, y)
    assert page.eval(box) == str(STEPS)
    page.mouse("mouseMoved", 2, 2)
    assert page.eval(box) == "0"
    x, y = page.center_of(f'[data-moment="{key}"]')
    page.mouse("mouseMoved", x, y)
    page.mouse("mousePressed", x, y)
    page.mouse("mouseReleased", x, y)
    page.mouse("mouseMoved", 2, 2)
    assert page.eval(box) == str(STEPS)
    assert "4 of 4 moments selected" in page.eval("document.getElementById('selection').textContent")
    assert page.eval("document.getElementById('view-range').textContent") != before
    # a top site selects its transfers the same way (the implicit uploads' site: STEPS)
    page.eval("document.querySelector('#site-0').click()")
    assert int(page.eval(box)) == page.eval("+document.querySelector('#site-0').dataset.moments") > 0
    # the timeline is drawn: lane stripes, op bars and transfer arrows are many colours
    w, h, px = png_pixels(page.screenshot("#timeline-canvas"))
    colours = {row[i:i + 3] for row in px for i in range(0, len(row), 3)}
    assert w > 200 and h > 60 and len(colours) > 20
    assert page.problems() == []


def test_big_run_level_of_detail(run_dir, chromium, tmp_path):
    """A run bigger than the detail budget keeps a window and moments, aggregates the rest,
    and says so; the page still loads cleanly (the analysis is called with a tiny budget)."""
    from jaxplace_cli.analysis import audit_run
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.run import open_run
    from jaxplace_cli.analysis.timeline import build_timeline
    from jaxplace_cli.report.html import render

    run = open_run(run_dir)
    result = audit_run(run, RuleConfig())
    tl = build_timeline(run, result, detail_max=4, moments_cap=2)
    assert not tl.detail.complete and tl.detail.ops_total == 6 and tl.detail.transfers_total == 7
    b = tl.buckets
    assert sum(r[1] for rows in b["ops"].values() for r in rows) == 6
    assert sum(r[1] for route in b["routes"] for r in route[3]) == 7
    upload = next(k for k, f in enumerate(result.findings) if f.rule == "implicit-h2d-in-loop")
    m = tl.moments[f"finding:{upload}"]
    # seqs (see the script; seq 3 is the host_put marker of the weights' device_put): uploads 6,
    # 8, 10, 12 precede calls 7, 9, 11, 13. Kept: the first and the last upload (cap 2), and
    # upload 8, inside the detail window (step 1, the first steady step: seqs 7-8; the budget
    # leaves it 2 seqs)
    assert m["total"] == STEPS
    assert [tl.transfers["seq"][i] for i in m["transfers"]] == [6, 8, 12]
    assert tl.detail.window is not None
    page_file = tmp_path / "lod.html"
    page_file.write_text(render(result, tl))
    page = chromium.open(page_file.resolve().as_uri())
    assert page.problems() == [] and len(page.requests()) == 1
    assert "time buckets" in page.eval("document.getElementById('lod-note').textContent")
    page.eval(f"document.querySelector('[data-moment=\"finding:{upload}\"]').click()")
    assert "3 of 4 moments selected" in page.eval("document.getElementById('selection').textContent")


def test_input_text_never_becomes_markup(run_dir, chromium, tmp_path):
    """Names from the store and lines of source files are untrusted: they reach the page as
    text. A site naming a file that is not a .py file does not copy its line into the page."""
    evil = tmp_path / "evil.py"
    evil.write_text("x = 1\n</script><img src=x onerror=\"document.title='pwned'\"><b>bold</b>\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2\n")
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    with sqlite3.connect(copy / "events.sqlite") as c:
        c.execute("UPDATE sites SET file = ?, line = 2, function = ? WHERE id = 2",
                  (str(evil), "<script>document.title='pwned2'</script>"))
        c.execute("UPDATE sites SET file = ?, line = 1 WHERE id = 1", (str(secret),))
        (tmp_path / "link.py").symlink_to(secret)  # a .py name for a file that is not one
        c.execute("UPDATE sites SET file = ?, line = 1 WHERE id = 3", (str(tmp_path / "link.py"),))
        c.execute("UPDATE ops SET name = ? WHERE seq = 4", ("</script><script>document.title='pwned3'</script>",))
    text = _report(copy, tmp_path / "evil.html").read_text()
    assert "<img src=x" not in text and "<b>bold</b>" not in text and "hunter2" not in text
    assert "&lt;img src=x onerror=" in text  # shown, as text
    page = chromium.open((tmp_path / "evil.html").resolve().as_uri())
    assert page.eval("document.title").startswith("jaxplace report")
    assert page.eval("document.querySelectorAll('img').length") == 0
    assert not page.eval("[...document.querySelectorAll('b')].some(b => b.textContent === 'bold')")
    assert page.problems() == [] and len(page.requests()) == 1
    data = page.eval("JSON.parse(document.getElementById('jaxplace-data').textContent).timeline.names")
    assert "</script><script>document.title='pwned3'</script>" in data


def test_audit_writes_the_same_page(run_dir, tmp_path):
    """`audit -o x.html` picks the HTML format from the extension: the same sections."""
    proc = cli("audit", run_dir, "-o", tmp_path / "a.html")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "a.html").read_text()
    for part in ('id="timeline-canvas"', 'id="matrix-totals"', 'id="findings"', 'id="steps-canvas"',
                 'Content-Security-Policy', "implicit-h2d-in-loop"):
        assert part in text, part
    assert text.isascii()
    data = json.loads(text.split('id="jaxplace-data">', 1)[1].split("</script>", 1)[0])
    assert data["timeline"]["steps"]["n"] == STEPS
    assert data["stepchart"]["counts"]["h2d"] == [1] * STEPS  # one implicit upload per step


def test_report_of_a_foreign_trace(chromium, tmp_path):
    """A jax.profiler trace has no jaxplace events: the page says so instead of a timeline,
    and still loads cleanly with the audit's matrix."""
    from conftest import REPO

    trace = REPO / "tests" / "data" / "foreign_traces" / "jax-rocm-mi300x-8gpu-conv-d2d"
    page_file = _report(trace, tmp_path / "trace.html")
    page = chromium.open(page_file.resolve().as_uri())
    assert page.problems() == [] and len(page.requests()) == 1
    assert "not a jaxplace run" in page.eval("document.getElementById('timeline').textContent")
    assert page.eval("document.querySelectorAll('#matrix-totals tr[data-kind]').length") == 3


def test_hand_edited_manifest_is_one_line_or_escaped(run_dir, tmp_path):
    """A manifest field of the wrong type (a hand-edited run) is one line naming it, exit 2
    (model/manifest.py checks every field); markup in a text field reaches the page escaped."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    m = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**m, "argv": 7}))
    proc = cli("report", copy, "-o", tmp_path / "bad.html")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "'argv'" in proc.stderr, proc.stderr
    assert not (tmp_path / "bad.html").exists()
    (copy / "run.json").write_text(json.dumps({**m, "cwd": "<b>x</b>", "error": "<script>alert(1)</script>"}))
    text = _report(copy, tmp_path / "m.html").read_text()
    assert "&lt;b&gt;x&lt;/b&gt;" in text and "<b>x</b>" not in text and "<script>alert" not in text
