"""`jaxplace diff` matches sites by stable identity (issue 26): file, function, kind, API and
the source text of the line (its position among identical ones), so a comment added at the
top of the script changes nothing, and a line moved elsewhere is `moved`, not vanished + new.

The unit cases compare hand-written audit documents (``analysis.diff.compare``); one case
records a sample again from a copy with a comment line on top, as a user would."""
from __future__ import annotations

import json

from conftest import SAMPLES, cli, jaxplace

from jaxplace_cli.analysis.diff import compare, to_dict
from jaxplace_cli.report.diff_render import github, text

FILE = "/src/train.py"


def doc(*sites, source=True) -> dict:
    """An audit document holding ``sites``: (line, function, api, text, count, bytes)."""
    rows = [{"kind": "h2d", "file": FILE, "line": line, "function": fn, "count": c, "bytes": b,
             "implicit": True, "blocking": False, "api": api, "routes": ["host>cpu:0"],
             **({"source": src} if source else {})} for line, fn, api, src, c, b in sites]
    total = {"count": sum(s["count"] for s in rows), "bytes": sum(s["bytes"] for s in rows)}
    return {"schema_version": 1, "transfers": {"min_bytes": 1024, "sites": rows, "totals": {
        "h2d": total, "d2h": {"count": 0, "bytes": 0}, "d2d": {"count": 0, "bytes": 0}}}}


def statuses(d) -> dict:
    return {s.key: (s.status, s.moved_from) for s in d.sites}


class _Opts:
    failures: list = []


A = ("main", "jit(step) (numpy argument)", "w = step(w, batch)", 20, 20 * 8192)
B = ("main", "x + y (numpy argument)", "y = x + mask", 3, 3 * 4096)
C = ("loop", "jnp.dot (numpy argument)", "z = jnp.dot(w, X)", 4, 4 * 65536)


def test_a_comment_added_on_top_changes_nothing():
    base = doc((10, *A), (20, *B), (30, *C))
    new = doc((11, *A), (21, *B), (31, *C))
    d = compare(base, new)
    assert statuses(d) == {"train.py:11 h2d jit(step) (numpy argument)": ("same", 0),
                           "train.py:21 h2d x + y (numpy argument)": ("same", 0),
                           "train.py:31 h2d jnp.dot (numpy argument)": ("same", 0)}
    assert github(d, _Opts()) == ""
    assert "no site changed" in text(d, _Opts())


def test_a_line_moved_below_the_others_is_moved_not_new():
    base = doc((10, *A), (20, *B), (30, *C))
    new = doc((11, *B), (21, *C), (41, *A))  # A moved to the end, the others shifted up and on
    d = compare(base, new)
    assert statuses(d) == {"train.py:41 h2d jit(step) (numpy argument)": ("moved", 10),
                           "train.py:11 h2d x + y (numpy argument)": ("same", 0),
                           "train.py:21 h2d jnp.dot (numpy argument)": ("same", 0)}
    assert github(d, _Opts()) == ""  # moved with the same traffic: nothing to warn about
    assert "[moved] train.py:41 h2d jit(step) (numpy argument) (was line 10): 20 -> 20 transfers" in text(d, _Opts())
    moved = [s for s in to_dict(d)["sites"] if s["status"] == "moved"]
    assert [(s["site"], s["moved_from"]) for s in moved] == [("train.py:41 h2d jit(step) (numpy argument)", 10)]


def test_identical_lines_match_by_their_position():
    first = ("main", "jnp.dot (numpy argument)", "y = jnp.dot(w, X)", 3, 3 * 4096)
    second = ("main", "jnp.dot (numpy argument)", "y = jnp.dot(w, X)", 5, 5 * 4096)
    d = compare(doc((10, *first), (20, *second)), doc((12, *first), (22, *second)))
    assert statuses(d) == {"train.py:12 h2d jnp.dot (numpy argument)": ("same", 0),
                           "train.py:22 h2d jnp.dot (numpy argument)": ("same", 0)}


def test_a_line_moved_into_another_function_is_moved():
    moved = ("helper", *B[1:])
    d = compare(doc((10, *A), (20, *B)), doc((10, *A), (40, *moved)))
    assert statuses(d)["train.py:40 h2d x + y (numpy argument)"] == ("moved", 20)


def test_a_new_site_and_a_vanished_one_are_still_said():
    d = compare(doc((10, *A), (20, *B)), doc((11, *A), (31, *C)))
    assert statuses(d) == {"train.py:11 h2d jit(step) (numpy argument)": ("same", 0),
                           "train.py:20 h2d x + y (numpy argument)": ("vanished", 0),
                           "train.py:31 h2d jnp.dot (numpy argument)": ("new", 0)}
    (line,) = github(d, _Opts()).splitlines()
    assert "new transfer site: train.py:31 h2d jnp.dot (numpy argument)" in line and "line=31" in line


def test_a_baseline_without_source_text_matches_by_function_and_position():
    # saved by an older jaxplace: no "source"; the comment on top still moves nothing
    d = compare(doc((10, *A), (20, *B), source=False), doc((11, *A), (21, *B)))
    assert [s.status for s in d.sites] == ["same", "same"]


def test_a_recorded_sample_copied_with_a_comment_on_top(sample_run, tmp_path):
    base = sample_run("pingpong_eager", devices=2)
    assert base.returncode == 0, base.stderr
    copy = tmp_path / "pingpong_eager.py"
    copy.write_text("# a comment added on top: every line moves down by one\n"
                    + (SAMPLES / "pingpong_eager.py").read_text())
    new = tmp_path / "new"
    proc = jaxplace("run", "-q", "--no-trace", "--devices", "2", "--out", new, copy)
    assert proc.returncode == 0, proc.stderr
    sites = json.loads(cli("audit", new, "--format", "json").stdout)["transfers"]["sites"]
    assert sites and all(s["source"] for s in sites)  # the recording kept each line's text
    d = json.loads(cli("diff", base.run, new, "--format", "json").stdout)
    assert d["sites"] and {s["status"] for s in d["sites"]} == {"same"}
    proc = cli("diff", base.run, new, "--format", "github")
    assert proc.returncode == 0 and proc.stdout == ""
