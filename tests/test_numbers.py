"""One set of numbers (issue 26): every view of an audit counts the same transfers, ops and
steps, the small ones (under ``min_bytes``) marked, never dropped.

Each run is written by hand (``Rows`` of test_rules_unit.py: no JAX, no subprocess) and read
by the CLI in this process (``cli``), as a user would; every count below is worked out in the
comments from the rows written.
"""
from __future__ import annotations

import html
import json
import re

from conftest import cli
from test_rules_unit import Rows

from jaxplace_cli.model.events import D2D, D2H, H2D


def _text(run, width: int = 200) -> str:
    proc = cli("audit", run, env={"COLUMNS": str(width)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _json(run) -> dict:
    proc = cli("audit", run, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _html(run, tmp_path) -> str:
    out = tmp_path / "report.html"
    proc = cli("report", run, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out.read_text()  # ASCII: "·" is &#183;, "<" &lt;


def _row(text: str, start: str) -> list[str]:
    """The cells of the first table row whose first cell is ``start``."""
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if cells and cells[0] == start:
            return cells
    raise AssertionError(f"no row {start!r} in:\n{text}")


def _small_pingpong(tmp_path):
    """A 64-byte array bounced 20 times: cpu:0 -> cpu:1 at line 11, back at line 12, 10 times
    each way. Every move but the first brings it back to a device it had left: 19 round
    trips, 19 x 64 = 1,216 B (>= 1 KiB: a finding); all 20 moves: 1,280 B, each < 1 KiB."""
    r = Rows()
    there, back = r.site(11), r.site(12)
    r.op(1, "ones", "cpu:0", outs=[1], site=there)
    seq, buf, dev = 2, 1, "cpu:0"
    for _ in range(20):
        other = "cpu:1" if dev == "cpu:0" else "cpu:0"
        site = there if dev == "cpu:0" else back
        r.xfer(seq, D2D, dev, other, 64, site, "jax.device_put", buf=buf + 1, op_seq=seq + 1)
        r.op(seq + 1, "device_put", other, "device_put", ins=[buf], outs=[buf + 1], site=site)
        seq, buf, dev = seq + 2, buf + 1, other
    return r.open(tmp_path / "run").path


def test_a_pingpong_of_small_arrays_is_in_every_view(tmp_path):
    run = _small_pingpong(tmp_path)
    doc = _json(run)
    # the document keeps its documented split: none of at least 1 KiB, 20 small
    assert doc["transfers"]["totals"]["d2d"] == {"count": 0, "bytes": 0}
    assert doc["transfers"]["small"]["d2d"] == {"count": 20, "bytes": 1280}
    (f,) = [f for f in doc["findings"] if f["rule"] == "pingpong"]
    assert (f["count"], f["bytes"]) == (19, 1216)
    assert f["message"] == (
        "data bounced between cpu:0 and cpu:1: 19 returns to a device it had left (1.2 KiB moved back) "
        "along the data flow of 1 array, in 20 transfers (1.2 KiB, all under 1.0 KiB); legs: "
        "cpu:0->cpu:1 at train.py:11 x10, cpu:1->cpu:0 at train.py:12 x10")

    text = _text(run)
    first = text.splitlines()[0]
    # 10 moves of 64 B at each line; line 11 first (equal bytes, equal count: listed order)
    assert first == ("findings: 1 error · biggest transfer cost: 640 B d2d at train.py:11 "
                     "(10×, explicit, all < 1.0 KiB)"), first
    assert _row(text, "d2d")[:4] == ["d2d", "20", "1.2 KiB (1,280 B)", "20 · 1.2 KiB"]
    # the sites table: the legs' counts, marked small
    assert _row(text, "/app/train.py:11")[1:4] == ["d2d", "10 (all small)", "640 B"]
    assert _row(text, "/app/train.py:12")[1:4] == ["d2d", "10 (all small)", "640 B"]

    page = _html(run, tmp_path)
    assert html.unescape('transfers: h2d 0 (0 B) · d2h 0 (0 B) · d2d 20 (1.2 KiB, all &lt; 1.0 KiB)') in html.unescape(page)
    cell = html.unescape(re.search(r'<td class="cell k-d2d" data-src="cpu:0" data-dst="cpu:1"[^>]*>(.*?)</td>', page).group(1))
    assert cell.startswith("<b>10</b> · 640 B") and "all small · 640 B" in cell, cell
    assert ">1 finding: 1 error<" in page  # not "1 findings"
    # the finding links to its 20 moves on the timeline, small as they are
    assert re.search(r'id="finding-0" data-moment="finding:0" data-moments="20"', page)
    assert re.search(r'id="site-s0" data-moment="site:s0" data-moments="10"', page)


def test_float_loss_reads_are_counted_with_the_big_reads(tmp_path):
    """200 float(loss) reads of 4 B at line 20 and 10 reads of 4 KiB at line 30: d2h 210,
    200 x 4 + 10 x 4,096 = 41,760 B (40.8 KiB), 200 of them small; not "d2h 10"."""
    r = Rows(devices=("cpu:0",))
    loss, dump = r.site(20), r.site(30)
    seq = 1
    for _ in range(200):
        r.xfer(seq, D2H, "cpu:0", "host", 4, loss, "float()", blocking=True)
        seq += 1
    for _ in range(10):
        r.xfer(seq, D2H, "cpu:0", "host", 4096, dump, "numpy.asarray", blocking=True)
        seq += 1
    run = r.open(tmp_path / "run").path
    text = _text(run)
    assert _row(text, "d2h")[:4] == ["d2h", "210", "40.8 KiB (41,760 B)", "200 · 800 B"]
    assert text.splitlines()[0].endswith("biggest transfer cost: 40.0 KiB d2h at train.py:30 (10×, explicit)")
    assert _row(text, "/app/train.py:20")[1:4] == ["d2h", "200 (all small)", "800 B"]
    page = _html(run, tmp_path)
    assert "d2h 210 (40.8 KiB, 200 of them &lt; 1.0 KiB)" in page
    cell = html.unescape(re.search(r'<td class="cell k-d2h" data-src="cpu:0" data-dst="host"[^>]*>(.*?)</td>', page).group(1))
    assert cell.startswith("<b>210</b> · 40.8 KiB") and "200 small · 800 B" in cell, cell


def test_a_site_with_both_sizes_counts_both(tmp_path):
    """One line uploads 3 arrays of 2 KiB and 2 of 8 B: the site is 5 transfers, 6,160 B, 2 of
    them small; the document's site keeps the 3 of at least 1 KiB."""
    r = Rows(devices=("cpu:0",))
    at = r.site(7)
    for seq, nbytes in enumerate((2048, 8, 2048, 8, 2048), 1):
        r.xfer(seq, H2D, "host", "cpu:0", nbytes, at, "jit(step) (numpy argument)", implicit=True)
    run = r.open(tmp_path / "run").path
    assert _row(_text(run), "/app/train.py:7")[1:4] == ["h2d", "5 (2 small)", "6.0 KiB"]
    (site,) = _json(run)["transfers"]["sites"]
    assert (site["count"], site["bytes"]) == (3, 6144)


def test_idle_device_counts_what_the_ops_table_counts(tmp_path):
    """cpu:0 runs 3 sin and 1 device_put, cpu:1 runs 2 sin, cpu:2 nothing: the ops table has
    4 + 2 = 6 ops; the finding judges the 5 compute ops and says both."""
    r = Rows(devices=("cpu:0", "cpu:1", "cpu:2"))
    at = r.site(5)
    for seq in (1, 2, 3):
        r.op(seq, "sin", "cpu:0", site=at)
    r.op(4, "device_put", "cpu:0", "device_put", site=at)
    r.op(5, "sin", "cpu:1", site=at)
    r.op(6, "sin", "cpu:1", site=at)
    run = r.open(tmp_path / "run").path
    doc = _json(run)
    assert doc["ops"]["total"] == 6
    (f,) = [f for f in doc["findings"] if f["rule"] == "idle-device"]
    assert f["message"] == ("1 of 3 devices ran no ops (cpu:2) while cpu:0, cpu:1 ran 5 compute ops "
                            "(6 in the ops table, with device_put/device_get)")
    assert "Ops per device (6 ops)" in _text(run)


def test_params_made_on_one_device_and_trained_on_another_leave_no_idle_device(tmp_path):
    """jax.random makes the parameters on cpu:0 (uncommitted), device_put commits them to cpu:1,
    where 10 steps run; cpu:2 and cpu:3 run nothing: serial work, no spread (a review found an
    idle-device warning here). The same step on cpu:0 and cpu:1, or a pipeline's two stages
    computing at the same time, is a spread: the warning stays."""
    def rows(second_device_steps: bool) -> Rows:
        r = Rows(devices=("cpu:0", "cpu:1", "cpu:2", "cpu:3"))
        at = r.site(5)
        r.op(1, "random.PRNGKey", "cpu:0", "jnp", outs=[1], site=at)
        r.op(2, "random.normal", "cpu:0", "jnp", ins=[1], outs=[2], site=at)
        r.op(3, "device_put", "cpu:1", "device_put", ins=[2], outs=[3], site=at)
        for k in range(10):
            r.op(4 + k, "jit(step)", "cpu:1", "jit", ins=[3 + k], outs=[4 + k], site=at)
        if second_device_steps:
            r.op(20, "jit(step)", "cpu:0", "jit", ins=[2], outs=[20], site=at)
        return r

    serial = _json(rows(False).open(tmp_path / "serial").path)
    assert [f["rule"] for f in serial["findings"] if f["rule"] == "idle-device"] == []
    spread = _json(rows(True).open(tmp_path / "spread").path)
    (f,) = [f for f in spread["findings"] if f["rule"] == "idle-device"]
    assert (f["severity"], f["count"]) == ("warning", 2) and "(cpu:2, cpu:3)" in f["message"]
    # a two-stage pipeline on cpu:0 and cpu:1 (different ops, computed at the same time): spread
    r = Rows(devices=("cpu:0", "cpu:1", "cpu:2", "cpu:3"))
    at = r.site(7)
    for k in range(10):
        r.op(2 * k + 1, "jit(stage1)", "cpu:0", "jit", outs=[2 * k + 1], site=at)
        r.op(2 * k + 2, "jit(stage2)", "cpu:1", "jit", ins=[2 * k + 1], outs=[2 * k + 2], site=at)
    pipe = _json(r.open(tmp_path / "pipe").path)
    assert [(f["severity"], f["count"]) for f in pipe["findings"] if f["rule"] == "idle-device"] == [("warning", 2)]


def _annotated_steps(tmp_path, first: int | None):
    """5 steps marked with StepTraceAnnotation (step_num first..first+4, or none), one 4 B
    float(loss) read in each, two in the fourth step (index 3)."""
    r = Rows(devices=("cpu:0",))
    at = r.site(20)
    seq = 1
    for i in range(5):
        r.marker(seq, "step-begin", f"train\t{'' if first is None else first + i}")
        r.op(seq + 1, "jit(step)", "cpu:0", "jit", site=at)
        for _ in range(2 if i == 3 else 1):
            r.xfer(seq + 2, D2H, "cpu:0", "host", 4, at, "float()", blocking=True)
            seq += 1
        r.marker(seq + 2, "step-end", "")
        seq += 3
    return r.open(tmp_path / "run")


def _breaches(run) -> list[str]:
    proc = cli("audit", run, "--max-d2h-per-step", "1", "--format", "json")
    assert proc.returncode == 1, proc.stderr  # a breach
    return [b["message"] for b in json.loads(proc.stdout)["budget"]["breaches"]]


def test_budget_names_the_step_as_the_script_numbers_it(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # step_num 50..54: the fourth step is the script's step 53
    assert _breaches(_annotated_steps(tmp_path / "a", 50).path) == [
        "d2h per step was limited to 1 but step 53 did 2 (train.py:20 float())"]
    # no step_num: steps count from 1, the fourth is step 4
    assert _breaches(_annotated_steps(tmp_path / "b", None).path) == [
        "d2h per step was limited to 1 but step 4 did 2 (train.py:20 float())"]


def test_a_killed_run_lists_its_devices_and_says_it_was_killed(tmp_path):
    """A run SIGKILLed before jaxplace saved it: run.json still says "running", no exit code,
    no devices. `jaxplace run --devices 2` made cpu:0 and cpu:1; its ops ran on cpu:0 only."""
    r = Rows(devices=())
    r.op(1, "sin", "cpu:0", site=r.site(3))
    run = r.open(tmp_path / "run", status="running", exit_code=None,
                 command=["jaxplace", "run", "--devices", "2", "train.py"]).path
    text = _text(run)
    assert "status: killed before it finished (no exit code)" in text
    assert "running (exit None)" not in text
    assert "devices: cpu:0, cpu:1" in text
    assert _json(run)["devices"] == ["cpu:0", "cpu:1"]
