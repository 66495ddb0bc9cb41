"""Issue 24 item 5: "in a loop" counts executions of a line, not calls on it.

First on stores built from rows (the style of tests/test_rules_unit.py: every expected number
worked out from the rows), then on real recorded programs (`jaxplace run`).
"""
from __future__ import annotations

import textwrap

from conftest import audit_json, jaxplace
from test_rules_unit import CFG, H2D, Rows

from jaxplace_cli.analysis.rules.executions import smallest_period
from jaxplace_cli.analysis.rules.transfers import host_sync_in_loop, implicit_h2d_in_loop
from jaxplace_cli.model.events import D2H

KiB = 1024


def test_smallest_period():
    assert smallest_period([]) == 0
    assert smallest_period(["a"]) == 1
    assert smallest_period(["a", "b"] * 4) == 2
    assert smallest_period(["u", "d", "u", "d", "u", "u", "d", "add", "add"]) == 9
    assert smallest_period(["a", "a", "a"]) == 1


def _dots_once(r, line_site, start):
    """`y = jnp.dot(w, X) + jnp.dot(X, w) + jnp.dot(X, X)` with a 4 KiB NumPy X, run once:
    X uploaded for each dot (X, X twice for the last), then the three dots, then two adds."""
    seq = start
    for n_up in (1, 1, 2):
        for _ in range(n_up):
            r.xfer(seq, H2D, "host", "cpu:0", 4 * KiB, line_site, "jnp.dot", implicit=True, op_seq=seq + n_up)
            seq += 1
        r.op(seq, "dot", kind="jnp", site=line_site)
        seq += 1
    for _ in range(2):
        r.op(seq, "add", site=line_site)
        seq += 1
    return seq


def test_several_calls_on_a_line_that_ran_once_are_no_loop(tmp_path):
    r = Rows()
    line = r.site(5)
    _dots_once(r, line, 1)  # 4 uploads at one (line, api): above the loop threshold (3)
    run = r.open(tmp_path / "run")
    assert implicit_h2d_in_loop(run, CFG) == []


def test_the_same_line_in_a_loop_is_a_loop(tmp_path):
    # for _ in range(5): y = jnp.dot(w, X)  -- one-line loop body: (upload, dot) x 5
    r = Rows()
    line = r.site(7)
    for i in range(5):
        r.xfer(1 + 2 * i, H2D, "host", "cpu:0", 4 * KiB, line, "jnp.dot", implicit=True, op_seq=2 + 2 * i)
        r.op(2 + 2 * i, "dot", kind="jnp", site=line)
    run = r.open(tmp_path / "run")
    (f,) = implicit_h2d_in_loop(run, CFG)
    assert (f.line, f.count, f.bytes) == (7, 5, 20 * KiB)


def test_the_once_line_inside_a_two_line_loop_body_is_a_loop(tmp_path):
    # for _ in range(3): <the three-dot line>; z = y.sum()   -- the body ran 3 times
    r = Rows()
    line, other = r.site(5), r.site(6)
    seq = 1
    for _ in range(3):
        seq = _dots_once(r, line, seq)
        r.op(seq, "sum", site=other)
        seq += 1
    run = r.open(tmp_path / "run")
    (f,) = implicit_h2d_in_loop(run, CFG)
    assert (f.line, f.count, f.bytes) == (5, 12, 48 * KiB)


def _steps(r, step_site, n, start=1):
    seq = start
    for _ in range(n):
        r.op(seq, "jit(step)", kind="jit", site=step_site)
        seq += 1
    return seq


def test_reads_after_the_loop_are_no_sync_in_the_loop(tmp_path):
    # 6 jit(step) calls (steps), then print_summary(): 4 blocking reads of differently shaped
    # arrays at one line that ran once -- numpyro's summary after sampling
    r = Rows()
    step, summary = r.site(10), r.site(12)
    seq = _steps(r, step, 6)
    for nbytes in (4000, 8000, 400, 40):
        r.xfer(seq, D2H, "cpu:0", "host", nbytes, summary, "np.asarray()", blocking=True)
        seq += 1
    run = r.open(tmp_path / "run")
    assert host_sync_in_loop(run, CFG) == []
    # the same without steps (one jitted sampler call): still one execution of the line
    r = Rows()
    summary = r.site(12)
    r.op(1, "jit(sample)", kind="jit", site=r.site(10))
    for seq, nbytes in enumerate((4000, 8000, 400, 40), start=2):
        r.xfer(seq, D2H, "cpu:0", "host", nbytes, summary, "np.asarray()", blocking=True)
    assert host_sync_in_loop(r.open(tmp_path / "run2"), CFG) == []


def test_a_read_every_step_is_a_sync_in_the_loop(tmp_path):
    r = Rows()
    step, read = r.site(10), r.site(11)
    seq = 1
    for _ in range(6):
        r.op(seq, "jit(step)", kind="jit", site=step)
        r.xfer(seq + 1, D2H, "cpu:0", "host", 4, read, "__float__", blocking=True)
        seq += 2
    run = r.open(tmp_path / "run")
    (f,) = host_sync_in_loop(run, CFG)
    assert (f.line, f.count) == (11, 6)
    assert "1 per step over 6 steps" in f.message


def test_no_text_says_zero_per_step(tmp_path):
    # 4 steps, then an evaluation loop after them: (upload, dot) x 4 at one line -- a real loop,
    # but outside the steps, so the count per step is no news
    r = Rows()
    step, ev = r.site(10), r.site(20)
    seq = _steps(r, step, 4)
    seq += 100  # past the last step (line 20 never closed one: the code after the loop)
    for _ in range(4):
        r.xfer(seq, H2D, "host", "cpu:0", 4 * KiB, ev, "jit(evaluate) argument", implicit=True, op_seq=seq + 1)
        r.op(seq + 1, "dot", kind="jnp", site=ev)
        seq += 2
    run = r.open(tmp_path / "run")
    (f,) = implicit_h2d_in_loop(run, CFG)
    assert f.count == 4
    assert "0 per step" not in f.message and "per step" not in f.message


ONCE = """\
import numpy as np
import jax.numpy as jnp
X = np.ones((32, 32), np.float32)  # 4 KiB
w = jnp.ones((32, 32))
y = jnp.dot(w, X) + jnp.dot(X, w) + jnp.dot(X, X)
print(float(y.sum()))
"""

LOOP = ONCE + """\
for _ in range(4):
    z = jnp.dot(w, X)
print(float(z.sum()))
"""


def _findings(tmp_path, name, source):
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / f"{name}.run"
    proc = jaxplace("run", "--devices", 1, "--no-trace", "--quiet", "--out", out, script)
    assert proc.returncode == 0, proc.stderr
    return [(f["rule"], f["line"], f["count"]) for f in audit_json(out)["findings"]]


def test_real_run_a_line_that_ran_once_gives_no_finding(tmp_path):
    assert [f for f in _findings(tmp_path, "once", ONCE) if f[0] == "implicit-h2d-in-loop"] == []


def test_real_run_a_loop_is_still_found(tmp_path):
    found = [f for f in _findings(tmp_path, "loop", LOOP) if f[0] == "implicit-h2d-in-loop"]
    assert found == [("implicit-h2d-in-loop", 8, 4)]  # the loop's line; line 5 ran once


def test_steps_are_the_loop_iterations(tmp_path):
    # main():            line 5 setup; loop: 10 put (opens), 11 step call, 12 helper log()
    # (another function, line 40) then 13 float (closes); after the loop: line 20 float.
    # By hand: step i runs from its put to the next put; step 1 starts at its put, not at the
    # setup; the last ends before line 20.
    from jaxplace_cli.analysis.steps import detect_steps

    r = Rows()
    setup, put, call, helper, read, after = (r.site(5), r.site(10), r.site(11), r.site(40, function="log"),
                                             r.site(13), r.site(20))
    r.op(1, "ones", kind="jnp", site=setup)
    seq, opens = 2, []
    for _ in range(4):
        opens.append(seq)
        r.op(seq, "device_put", kind="device_put", site=put)
        r.xfer(seq + 1, H2D, "host", "cpu:0", 4 * KiB, put, "jax.device_put")
        r.op(seq + 2, "jit(step)", kind="jit", site=call)
        r.xfer(seq + 3, H2D, "host", "cpu:0", 4, call, "jit(step) (Python scalar)", implicit=True, op_seq=seq + 2)
        r.op(seq + 4, "add", kind="jnp", site=helper)
        r.xfer(seq + 5, D2H, "cpu:0", "host", 4, read, "float()", blocking=True)
        seq += 6
    r.xfer(seq, D2H, "cpu:0", "host", 4, after, "float()", blocking=True)
    info = detect_steps(r.open(tmp_path / "run"))
    assert [(s.start_seq, s.end_seq) for s in info.steps] == list(zip(opens, [*opens[1:], seq]))


def test_without_lines_above_the_call_a_step_starts_at_its_call(tmp_path):
    # the batch is put in another function (a loader, line 30 of load()) before each call at
    # line 11: no line of the loop's function opens the iteration, so the cut stays at the call
    from jaxplace_cli.analysis.steps import detect_steps

    r = Rows()
    load, call = r.site(30, function="load"), r.site(11)
    calls = []
    for i in range(4):
        r.xfer(10 * i + 1, H2D, "host", "cpu:0", 4 * KiB, load, "jax.device_put")
        r.op(10 * i + 2, "jit(step)", kind="jit", site=call)
        calls.append(10 * i + 2)
    info = detect_steps(r.open(tmp_path / "run"))
    # the loader's puts, in a function of their own, go with the step before (no stack here says
    # where they were called from); the last step ends at the run's end: nothing follows
    assert [s.start_seq for s in info.steps] == calls
    assert info.steps[-1].end_seq == calls[-1] + 1


CONVERGE = """\
import jax, jax.numpy as jnp

@jax.jit
def update(x):
    return x * 0.5

x = jnp.ones(4)
while True:
    x = update(x)
    if float(jnp.abs(x).max()) < 1e-3:
        break
while jnp.abs(x).max() > 1e-6:
    x = update(x)
for i in range(10):
    x = update(x)
    print(float(x[0]))
"""


def test_a_convergence_test_is_told_to_use_while_loop(tmp_path):
    # by hand: 0.5**k < 1e-3 at k = 10: line 10's float() runs 10 times; 0.5**k < 1e-6 from
    # k = 20: line 12's bool() 11 times; line 16's logged float() 10 times, which is no test
    script = tmp_path / "converge.py"
    script.write_text(CONVERGE)
    proc = jaxplace("run", "--devices", 1, "--no-trace", "--quiet", "--out", tmp_path / "r", script)
    assert proc.returncode == 0, proc.stderr
    got = {f["line"]: f for f in audit_json(tmp_path / "r")["findings"] if f["rule"] == "host-sync-in-loop"}
    assert {line: f["count"] for line, f in got.items()} == {10: 10, 12: 11, 16: 10}
    assert "jax.lax.while_loop" in got[10]["fix"] and "jax.lax.while_loop" in got[12]["fix"]
    assert "while_loop" not in got[16]["fix"]
