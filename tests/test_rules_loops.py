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


def _cuts(tmp_path, rows):
    from jaxplace_cli.analysis.steps import detect_steps

    return [(s.start_seq, s.end_seq) for s in detect_steps(rows.open(tmp_path / "run")).steps]


def test_the_two_branches_of_an_if_are_one_loop(tmp_path):
    # for i: 11 put; if i % 3 == 0: 13 step(p, x) else: 15 step(p, -x) (the negation at line 15
    # first); 16 float. By hand: each iteration runs from its put to the next put, the else
    # branch's negation is its call's statement, not the closing of the if's iteration
    r = Rows()
    put, if_call, else_call, read = r.site(11), r.site(13), r.site(15), r.site(16)
    seq, opens = 1, []
    for i in range(6):
        opens.append(seq)
        r.xfer(seq, H2D, "host", "cpu:0", 4 * KiB, put, "jax.device_put")
        if i % 3:
            r.op(seq + 1, "neg", kind="jnp", site=else_call)
        r.op(seq + 2, "jit(step)", kind="jit", site=if_call if i % 3 == 0 else else_call)
        r.xfer(seq + 3, D2H, "cpu:0", "host", 4, read, "float()", blocking=True)
        seq += 4
    assert _cuts(tmp_path, r) == list(zip(opens, [*opens[1:], seq]))


def test_code_between_two_loops_is_in_no_step(tmp_path):
    # main(): 3 x (13 put, 14 step, 15 float); 16 float(sum(p)) between the loops; 3 x (19 put,
    # 20 step, 21 float). By hand: the first loop's last iteration ends after its line-15 read,
    # the second's first starts at its put, and line 16's read is in neither
    r = Rows()
    put1, call1, read1, mid, put2, call2, read2 = (r.site(n) for n in (13, 14, 15, 16, 19, 20, 21))
    seq, cuts = 1, []
    for put, call, read in ((put1, call1, read1), (put2, call2, read2)):
        for _ in range(3):
            r.xfer(seq, H2D, "host", "cpu:0", 4 * KiB, put, "jax.device_put")
            r.op(seq + 1, "jit(step)", kind="jit", site=call)
            r.xfer(seq + 2, D2H, "cpu:0", "host", 4, read, "float()", blocking=True)
            cuts.append([seq, seq + 3])
            seq += 3
        if put is put1:
            r.xfer(seq, D2H, "cpu:0", "host", 4, mid, "float()", blocking=True)
            seq += 1
    assert _cuts(tmp_path, r) == [tuple(c) for c in cuts]


def test_a_damaged_line_is_no_line(tmp_path):
    # a site's line of 1e30 (REAL) or text, as a hand-edited store may hold: the audit reads the
    # run (exit 0), the events of those sites with no line (they go with their neighbours); a
    # step call's NULL site is no site to the steps (another analysis may call the store
    # damaged: one line, exit 2)
    from conftest import cli

    from jaxplace_cli.analysis.steps import detect_steps
    from jaxplace_cli.model.events import Site

    for null in (False, True):
        r = Rows()
        put, call = r.site(11), r.site(12)
        for i in range(4):
            r.xfer(3 * i + 1, H2D, "host", "cpu:0", 4 * KiB, put, "jax.device_put")
            r.op(3 * i + 2, "jit(step)", kind="jit", site=None if null and i == 2 else call)
        r.tables["sites"][0] = Site(put, "train.py", 1e30, "main")
        r.tables["sites"][1] = Site(call, "train.py", "twelve", "main")
        run = r.open(tmp_path / f"run{null}")
        assert len(detect_steps(run).steps) == 4
        proc = cli("audit", run.path, "--max-h2d-per-step", "1")
        assert proc.returncode == (2 if null else 0), proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == (1 if null else 0)


def test_a_read_in_a_loop_condition_is_a_test():
    from jaxplace_cli.analysis.rules.transfers import _tests_a_read

    for text in ("if float(err) < tol: break", "if float(err) < tol:", "elif loss.item() > 3:",
                 "while float(e) > tol:"):
        assert _tests_a_read(text), text
    for text in ('if verbose: print("loss", float(loss))', "if verbose:", "print(float(x))",
                 "if i % 10 == 0: print(float(loss))", "x = 1 if float(a) else 2", "if (float(a)", ""):
        assert not _tests_a_read(text), text


def test_a_read_in_one_branch_every_10_steps_is_no_sync_in_the_loop(tmp_path):
    # for i in range(30): if i % 10 == 0: 13 step, 14 float(loss) else: 16 step. By hand: 3
    # stalls in 30 steps of one loop (the branches interleave): no finding; judged by the if
    # branch's own steps it was 3 in 3
    r = Rows()
    if_call, read, else_call = r.site(13), r.site(14), r.site(16)
    seq = 1
    for i in range(30):
        r.op(seq, "jit(step)", kind="jit", site=if_call if i % 10 == 0 else else_call)
        if i % 10 == 0:
            r.xfer(seq + 1, D2H, "cpu:0", "host", 4, read, "float()", blocking=True)
        seq += 2
    assert host_sync_in_loop(r.open(tmp_path / "run"), CFG) == []


def test_a_line_between_the_calls_of_two_branches_goes_with_the_nearer_call(tmp_path):
    # for i: 12 put x; if i % 2 == 0: 14 step(p, x), 15 float(loss) else: 17 put noise,
    # 18 step(p, x + n). Lines 15 and 17 lie below the if's call and above the else's: by hand,
    # 15 closes the if's iteration and 17 opens the else's; each iteration runs from its put
    r = Rows()
    put, if_call, read, noise, else_call = (r.site(n) for n in (12, 14, 15, 17, 18))
    seq, opens = 1, []
    for i in range(6):
        opens.append(seq)
        r.xfer(seq, H2D, "host", "cpu:0", 4 * KiB, put, "jax.device_put")
        if i % 2 == 0:
            r.op(seq + 1, "jit(step)", kind="jit", site=if_call)
            r.xfer(seq + 2, D2H, "cpu:0", "host", 4, read, "float()", blocking=True)
        else:
            r.xfer(seq + 1, H2D, "host", "cpu:0", 4 * KiB, noise, "jax.device_put")
            r.op(seq + 2, "jit(step)", kind="jit", site=else_call)
        seq += 3
    assert _cuts(tmp_path, r) == list(zip(opens, [*opens[1:], seq]))


def test_a_put_on_the_call_line_opens_the_iteration_it_feeds(tmp_path):
    # for b in data: 11 w, l = step(w, jax.device_put(b)); 12 float(l) -- then ``l = step(w, x)[1]``
    # style indexing at the call line (its result is no input of the next call). By hand: each
    # iteration starts at its own put; the indexing after a call stays in that call's step
    r = Rows()
    call, read = r.site(11), r.site(12)
    seq, opens, buf = 1, [], 100
    for _ in range(5):
        opens.append(seq)
        r.op(seq, "device_put", kind="device_put", outs=[buf], site=call)
        r.xfer(seq + 1, H2D, "host", "cpu:0", 4 * KiB, call, "jax.device_put", buf=buf, op_seq=seq)
        r.op(seq + 2, "jit(step)", kind="jit", ins=[7, buf], outs=[buf + 1, buf + 2], site=call)
        r.op(seq + 3, "getitem", kind="method", ins=[buf + 2], outs=[buf + 3], site=call)
        r.xfer(seq + 4, D2H, "cpu:0", "host", 4, read, "float()", blocking=True)
        seq, buf = seq + 5, buf + 10
    assert _cuts(tmp_path, r) == list(zip(opens, [*opens[1:], seq]))
