"""Bytes by call stack (issue 28) on a sample with nested functions over three files
(tests/programs/stacks: train.py:step -> model.py:loss -> layers.py:attn, and two callers of
layers.helper), whose bytes per frame are counted by hand below: the stored trie, the terminal
tree (``audit --stacks``), the speedscope export and the HTML icicle in Chromium all give
exactly those numbers, on the C path and the Python twin alike; a run stored before the stack
tables still audits (each transfer's stack is its site)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO, cli

SAMPLE = Path(__file__).parent / "programs" / "stacks"
N = 3  # steps of train.py (the first one is warm-up: N - 1 steady-state steps)
X = 256 * 4  # x: 256 float32


def _line(file: str, text: str) -> str:
    """``file:line`` of the one line of the sample holding ``text`` (read here, not recorded)."""
    lines = (SAMPLE / file).read_text().splitlines()
    (n,) = [i + 1 for i, s in enumerate(lines) if text in s]
    return f"{file}:{n}"


def _expected() -> dict:
    """Frame path (outermost first, ``file:line function``) -> (bytes, count) of every transfer
    at or below it, by hand: attn moves x twice a step (d2d, d2h), loss's helper 8 floats a
    step, init's helper 16 floats once, and the module uploads x once."""
    loop = f"{_line('train.py', '    step(x)')} <module>"
    step = f"{_line('train.py', 'return model.loss(x)')} step"
    attn_call = f"{_line('model.py', 'a = layers.attn(x)')} loss"
    helper_call = f"{_line('model.py', 'b = layers.helper(8)')} loss"
    d2d = f"{_line('layers.py', 'y = jax.device_put')} attn"
    d2h = f"{_line('layers.py', 'return np.asarray(y)')} attn"
    helper = f"{_line('layers.py', 'return jax.device_put(np.ones')} helper"
    init = f"{_line('train.py', 'w = model.init()')} <module>"
    init_call = f"{_line('model.py', 'return layers.helper(16)')} init"
    upload = f"{_line('train.py', 'x = jax.device_put')} <module>"
    per_step = 2 * X + 8 * 4
    return {
        (loop,): (N * per_step, 3 * N),
        (loop, step): (N * per_step, 3 * N),
        (loop, step, attn_call): (N * 2 * X, 2 * N),
        (loop, step, attn_call, d2d): (N * X, N),
        (loop, step, attn_call, d2h): (N * X, N),
        (loop, step, helper_call): (N * 32, N),
        (loop, step, helper_call, helper): (N * 32, N),
        (init,): (64, 1),
        (init, init_call): (64, 1),
        (init, init_call, helper): (64, 1),
        (upload,): (X, 1),
    }


@pytest.fixture(scope="module", params=["native", "python"])
def run(request, sample_run):
    rec = sample_run(SAMPLE / "train.py", devices=2, capture=None if request.param == "native" else "python")
    assert rec.returncode == 0, rec.stderr
    return rec.run


def _tree_lines(text: str) -> dict:
    """The ``--stacks`` tree read back: frame path -> (bytes, count)."""
    out, path = {}, []
    body = text.split("Bytes by call stack", 1)[1].splitlines()[1:]
    for line in body:
        m = re.match(r"^( +)(\S+ \S+)  ([\d,]+) B  ([\d,]+)×", line)
        if not m:
            continue
        depth = len(m.group(1)) // 2 - 1
        del path[depth:]
        path.append(m.group(2))
        out[tuple(path)] = (int(m.group(3).replace(",", "")), int(m.group(4).replace(",", "")))
    return out


def _steady(path: tuple, nbytes: int) -> int:
    """Bytes of the steady-state steps: the loop's are the same each step, the rest are none."""
    return nbytes * (N - 1) // N if path[0].endswith("<module>") and "step(x)" in _source(path[0]) else 0


def _source(frame: str) -> str:
    file, line = frame.split()[0].split(":")
    return (SAMPLE / file).read_text().splitlines()[int(line) - 1]


def test_terminal_tree_has_the_hand_counted_bytes(run):
    proc = cli("audit", run, "--stacks", "-f", "text")
    assert proc.returncode == 0, proc.stderr
    assert _tree_lines(proc.stdout) == _expected()


def test_a_stack_of_one_frame_is_stored_as_its_site_alone(run):
    """The module's own upload is made in one user frame, its site: it gets no stack row (the
    writer inserts a quarter fewer rows in a loop at module level), and the tree above still
    holds it; every transfer made deeper down names its stack."""
    import sqlite3

    with sqlite3.connect(f"file:{Path(run) / 'events.sqlite'}?mode=ro", uri=True) as c:
        transfers = c.execute("SELECT COUNT(*) FROM transfers").fetchone()[0]
        named = c.execute("SELECT COUNT(*) FROM transfer_stacks").fetchone()[0]
        roots = c.execute("SELECT COUNT(*) FROM transfer_stacks s JOIN stacks n ON n.node = s.node "
                          "WHERE n.parent = 0").fetchone()[0]
    assert transfers == 3 * N + 1 + 1  # _expected(): the loop's, init's, the module's upload
    assert (named, roots) == (transfers - 1, 0)


def test_speedscope_export_agrees(run, tmp_path):
    out = tmp_path / "stacks.speedscope.json"
    proc = cli("export", run, "--speedscope", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    prof = doc["profiles"][0]
    assert prof["type"] == "sampled" and prof["unit"] == "bytes"
    assert len(prof["samples"]) == len(prof["weights"]) and prof["endValue"] == sum(prof["weights"])
    inclusive: dict = {}
    for stack, w in zip(prof["samples"], prof["weights"]):
        names = [f"{Path(frames[i]['file']).name}:{frames[i]['line']} {frames[i]['name']}" for i in stack]
        for d in range(1, len(names) + 1):
            inclusive[tuple(names[:d])] = inclusive.get(tuple(names[:d]), 0) + w
    assert inclusive == {k: b for k, (b, _) in _expected().items()}
    by_kind = {p["name"].split()[0]: p["endValue"] for p in doc["profiles"][1:]}
    assert by_kind == {"h2d": X + 64 + N * 32, "d2h": N * X, "d2d": N * X}


def test_old_run_without_stack_tables_still_audits():
    case = sorted(p for p in (REPO / "tests" / "data" / "golden_runs").iterdir() if p.is_dir())[0]
    proc = cli("audit", case, "--stacks", "-f", "text")
    assert proc.returncode == 0, proc.stderr
    assert "Bytes by call stack" in proc.stdout
    proc = cli("audit", case, "--stacks", "-f", "json")
    assert proc.returncode == 2 and "--stacks" in proc.stderr


def test_icicle_in_chromium(run, chromium, tmp_path):
    out = tmp_path / "report.html"
    proc = cli("report", run, "-o", out)
    assert proc.returncode == 0, proc.stderr
    url = out.resolve().as_uri()
    page = chromium.open(url)
    assert page.problems() == []
    assert page.requests() == [url]
    boxes = page.eval("[...document.querySelectorAll('#stacks-box .sbox')].map(b => [b.dataset.id, "
                      "b.dataset.parent, b.querySelector('span').textContent, +b.dataset.bytes, +b.dataset.count, "
                      "+b.dataset.steady, b.getBoundingClientRect().width])")
    names = {i: (p, name) for i, p, name, *_ in boxes}

    def path(i):
        p, name = names[i]
        return (*path(p), name) if p != "-1" else (name,)

    assert {path(i): (b, c) for i, _, _, b, c, _, _ in boxes} == _expected()
    assert {path(i): s for i, _, _, _, _, s, _ in boxes} == {k: _steady(k, b) for k, (b, _) in _expected().items()}
    assert all(w > 0 for *_, w in boxes)  # every frame drawn
    # the step filter: the steady-state steps leave out init's and the upload's frames
    page.eval("document.querySelector('#stacks-tools button[data-step=\"steady\"]').click()")
    shown = page.eval("[...document.querySelectorAll('#stacks-box .sbox')].filter(b => b.style.display !== 'none')"
                      ".map(b => b.querySelector('span').textContent)")
    assert len(shown) == 7 and not any("init" in s for s in shown)
    page.eval("document.querySelector('#stacks-tools button[data-step=\"all\"]').click()")
    # the d2h filter hides the frames that moved none; a click zooms, a second one zooms out
    page.eval("document.querySelector('#stacks-tools button[data-kind=\"d2h\"]').click()")
    shown = page.eval("[...document.querySelectorAll('#stacks-box .sbox')].filter(b => b.style.display !== 'none')"
                      ".map(b => b.querySelector('span').textContent)")
    assert len(shown) == 4 and all("helper" not in s and "init" not in s for s in shown)
    page.eval("document.querySelector('#stacks-tools button[data-kind=\"all\"]').click()")
    leaf = page.eval("[...document.querySelectorAll('#stacks-box .sbox.leaf')].find(b => b.textContent.includes('attn')).dataset.id")
    page.eval(f"document.querySelector('#stacks-box .sbox[data-id=\"{leaf}\"] span').click()")
    assert page.eval("document.getElementById('stacks-box').dataset.zoom") == leaf
    width = page.eval(f"document.querySelector('#stacks-box .sbox[data-id=\"{leaf}\"]').style.width")
    assert width == "100%"
    page.eval(f"document.querySelector('#stacks-box .sbox[data-id=\"{leaf}\"] span').click()")
    assert page.eval("document.getElementById('stacks-box').dataset.zoom") == ""
    # leaves link to their line's findings / top-site row (the site row selects its moments)
    links = page.eval("[...document.querySelectorAll('#stacks-box a')].map(a => a.getAttribute('href'))")
    assert links and all(page.eval(f"!!document.getElementById('{h[1:]}')") for h in links)
    assert page.problems() == []


def test_damaged_stack_tables_are_read_safely(run, tmp_path):
    """A hand-edited trie (a node its own parent, a parent that does not exist, a stack row
    naming no node) is untrusted input: the tree still ends, every transfer still counted."""
    import shutil
    import sqlite3

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    with sqlite3.connect(copy / "events.sqlite") as c:
        (top,) = c.execute("SELECT MIN(node) FROM stacks").fetchone()
        c.execute("UPDATE stacks SET parent = node WHERE node = ?", (top,))
        c.execute("UPDATE stacks SET parent = 9999 WHERE node = (SELECT MAX(node) FROM stacks)")
        c.execute("UPDATE transfer_stacks SET node = 12345 WHERE seq = (SELECT MIN(seq) FROM transfer_stacks)")
        c.execute("UPDATE stacks SET function = '<b>x</b>\x1b[31m' WHERE node = ?", (top,))
    proc = cli("audit", copy, "--stacks", "-f", "text")
    assert proc.returncode == 0, proc.stderr
    total = sum(b for (b, _) in [v for k, v in _expected().items() if len(k) == 1])
    assert "transfers at or below each frame: " in proc.stdout
    roots = [line for line in proc.stdout.split("Bytes by call stack", 1)[1].splitlines() if re.match(r"^  \S", line)]
    assert sum(int(re.search(r"  ([\d,]+) B  ", r).group(1).replace(",", "")) for r in roots) == total
    assert "\x1b" not in proc.stdout


def test_the_tree_is_bounded(run):
    """Past ``max_frames`` the smallest frames fold into one "(N more)" box per parent, which
    keeps their bytes: every level still adds up to the run's total."""
    from jaxplace_cli.analysis.audit import Audit

    full = Audit(run).stacks()
    assert (full.frames, full.folded) == (len(_expected()), 0)
    tree = Audit(run).stacks(max_frames=3)
    assert tree.frames == 3 and tree.folded == len(_expected()) - 3
    total = sum(b for k, (b, _) in _expected().items() if len(k) == 1)
    assert sum(f.total for f in tree.roots) == total == sum(tree.bytes.values())
    names = [f.function for _, f in tree.walk()]
    # kept: the loop's frame, the step, loss's attn call (the biggest first); folded: attn's two
    # lines, loss's helper call with its helper, and beside the loop the upload and init's three
    assert names[:3] == [f.split(" ", 1)[1] for f in next(k for k in _expected() if len(k) == 3)]
    assert sorted(n for n in names if n.endswith("more)")) == ["(2 more)", "(2 more)", "(4 more)"]


def test_a_job_has_a_tree_per_process(run, tmp_path):
    """A job directory (proc-<i>/ runs, as `jaxplace launch` writes them; here two copies of the
    sample's run): `--stacks` prints one tree per process and the speedscope file holds each
    process's profiles, with the hand-counted bytes."""
    import shutil

    job = tmp_path / "job"
    for i in range(2):
        shutil.copytree(run, job / f"proc-{i}")
    proc = cli("audit", job, "--stacks", "-f", "text")
    assert proc.returncode == 0, proc.stderr
    parts = proc.stdout.split("Bytes by call stack of process ")[1:]
    assert [p[:2] for p in parts] == ["p0", "p1"]
    assert all(_tree_lines("Bytes by call stack" + p) == _expected() for p in parts)
    out = tmp_path / "job.speedscope.json"
    assert cli("export", job, "--speedscope", out).returncode == 0
    names = [p["name"] for p in json.loads(out.read_text())["profiles"]]
    assert names[0] == "p0 · all transfers (bytes)" and "p1 · all transfers (bytes)" in names


def test_the_console_scripts_own_frame_is_not_in_the_tree(tmp_path):
    """Recorded through the installed `jaxplace` command, as README tells users to run it: pip's
    launcher file (the venv's bin/jaxplace) runs under every frame of the script but is not the
    user's code; the tree is the same hand-counted one, with no launcher frame on top."""
    import subprocess
    import sys

    from conftest import child_env

    out = tmp_path / "r"
    rec = subprocess.run([str(Path(sys.executable).parent / "jaxplace"), "run", "-q", "--no-trace", "--devices", "2",
                          "--out", str(out), str(SAMPLE / "train.py")], cwd=REPO, env=child_env(), capture_output=True,
                         text=True, timeout=240)
    assert rec.returncode == 0, rec.stderr
    proc = cli("audit", out, "--stacks", "-f", "text")
    assert proc.returncode == 0, proc.stderr
    assert "jaxplace:" not in proc.stdout.split("Bytes by call stack", 1)[1]
    assert _tree_lines(proc.stdout) == _expected()
