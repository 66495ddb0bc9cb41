"""Issue 24 item 6: the trace window cannot explode on one long dispatch.

The window is placed on the steady state (after the first dispatch that compiled nothing) and
is cut from a watchdog thread at its deadline while a single long dispatch runs; a program
whose only long dispatch is its first (compiling) call gets no window at all. Asserted on
run.json's trace fields, the trace file and the audit's notes, never on timings.
"""
from __future__ import annotations

import json
import textwrap

from conftest import audit_json, jaxplace

LONG_FIRST = """\
import jax, jax.numpy as jnp

@jax.jit
def run(x):
    return jax.lax.fori_loop(0, 100_000, lambda i, v: jnp.tanh(v) * 0.999 + 0.001, x)

print(float(run(jnp.ones(64)).sum()))
"""

LONG_LATER = """\
import time
import jax, jax.numpy as jnp

def wait(v, s):
    time.sleep(float(s))  # a dispatch as long as the test needs on any machine, fast or loaded
    return v

@jax.jit
def small(x):
    return x + 1.0

@jax.jit
def run(x, s):
    return jax.pure_callback(wait, jax.ShapeDtypeStruct(x.shape, x.dtype), x, s)

x = jnp.ones(64)
x = small(small(x))  # the second call compiles nothing: the window opens after it
x = run(x, 0.0)  # compiles run (inside the window)
print(float(run(x, 2.0).sum()))  # one long dispatch, seconds: cut by the watchdog
"""


def _run(tmp_path, name, source, *opts):
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / f"{name}.run"
    proc = jaxplace("run", "--devices", 1, "--quiet", *opts, "--out", out, script)
    assert proc.returncode == 0, proc.stderr
    return out, proc, json.loads((out / "run.json").read_text())["trace"]


def test_a_long_first_dispatch_opens_no_window(tmp_path):
    out, proc, trace = _run(tmp_path, "long_first", LONG_FIRST)
    assert proc.stderr == ""  # no line about the trace on the user's stderr
    assert (trace["mode"], trace["state"], trace["traced_ops"], trace["files"]) == ("window", "skipped", 0, [])
    assert not (out / "plugins").exists()
    assert any(n.startswith("trace window: not opened") for n in audit_json(out)["notes"])


def test_a_long_later_dispatch_is_cut_by_the_watchdog(tmp_path):
    out, _, trace = _run(tmp_path, "long_later", LONG_LATER, "--trace-seconds", "0.2")
    assert (trace["state"], trace["cut"]) == ("closed", "watchdog")
    # the window opened after small's second call: run(x, 10) is the one dispatch inside it
    # that returned before the deadline (the long one had not returned when it was cut)
    assert trace["traced_ops"] == 1
    (path,) = [out / f for f in trace["files"]]
    assert path.stat().st_size < 16 * 1024 * 1024  # bounded: a fraction of one long dispatch
    notes = audit_json(out)["notes"]
    assert any(n.startswith("trace window: cut at its 0.2 s deadline while a dispatch ran") for n in notes)


def test_a_window_closed_by_its_ops_says_so(tmp_path):
    src = "import jax.numpy as jnp\nx = jnp.ones(8)\nfor _ in range(300):\n    x = x * 1.0\nprint(float(x.sum()))\n"
    _, _, trace = _run(tmp_path, "many", src, "--trace-ops", "50", "--trace-seconds", "60")
    assert (trace["state"], trace["cut"], trace["traced_ops"]) == ("closed", "ops", 50)
