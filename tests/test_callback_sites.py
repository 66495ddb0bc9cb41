"""Issue 24 item 3: host callbacks are put at the user's line that called the jitted function,
the same on every run.

XLA runs a callback inside a ``fori_loop`` on its own thread, sometimes after the jitted call
returned (measured on JAX 0.10.2 before this fix: 12 of 50 callbacks of the program below at
``?:0`` on one run, none on the next). Recorded three times with ``jaxplace run``: every
callback leg is at line 17, ``x = step(x)``; counts and bytes read off the program.
"""
from __future__ import annotations

import sqlite3
import textwrap

from conftest import jaxplace

PROGRAM = """\
import numpy as np
import jax, jax.numpy as jnp

def host_fn(x):
    return np.asarray(x) * 2

@jax.jit
def step(x):
    def body(i, z):
        z = jnp.tanh(z @ z)
        jax.debug.callback(lambda v: None, z[0, 0])
        return jax.pure_callback(host_fn, jax.ShapeDtypeStruct(z.shape, z.dtype), z)
    return jax.lax.fori_loop(0, 5, body, x)

x = jnp.ones((256, 256)) * 0.001
for i in range(10):
    x = step(x)
print(float(x.sum()))
"""
N = 10 * 5  # calls x loop iterations
BIG = 256 * 256 * 4


def test_callbacks_are_at_the_calling_line_on_every_run(tmp_path):
    script = tmp_path / "cb.py"
    script.write_text(textwrap.dedent(PROGRAM))
    expected = [("d2h", "jax.debug.callback (operands to host)", 17, N, 4 * N),
                ("d2h", "jax.pure_callback (operands to host)", 17, N, BIG * N),
                ("h2d", "jax.pure_callback (results to device)", 17, N, BIG * N)]
    for i in range(3):
        out = tmp_path / f"run{i}"
        proc = jaxplace("run", "--devices", 2, "--no-trace", "--quiet", "--out", out, script)
        assert proc.returncode == 0, proc.stderr
        with sqlite3.connect(out / "events.sqlite") as conn:
            got = conn.execute(
                "SELECT t.kind, t.api, s.line, count(*), sum(t.bytes) FROM transfers t "
                "LEFT JOIN sites s ON s.id = t.site WHERE t.api LIKE '%callback%' "
                "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3").fetchall()
        assert got == expected, f"run {i}"


THREE_LINES = """\
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import io_callback

def host_fn(x):
    return np.asarray(x) * 2

@jax.jit
def f(x):
    jax.debug.callback(lambda v: None, x[0, 0])
    y = jax.pure_callback(host_fn, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return io_callback(host_fn, jax.ShapeDtypeStruct(x.shape, x.dtype), y) + 1

@jax.jit
def g(x):
    return f(x) * 3

x = jnp.ones((64, 64))
a = f(x)
b = f(a)
c = g(b)
d = g(c)
print(float(d.sum()))
"""


def test_callbacks_run_inside_a_call_are_at_that_calls_line(tmp_path):
    """One jitted function called from lines 19 and 20, and inside another jit called from 21
    and 22: XLA runs these callbacks inside the call on the calling thread, so each call's legs
    are at its own line with its own op seq (all were at line 19, the call that traced them;
    g's calls had op seq 0: the name check a review found)."""
    script = tmp_path / "lines.py"
    script.write_text(THREE_LINES)
    out = tmp_path / "run"
    proc = jaxplace("run", "--no-trace", "--quiet", "--out", out, script)
    assert proc.returncode == 0, proc.stderr
    big = 64 * 64 * 4
    legs = [("d2h", "jax.debug.callback (operands to host)", 4),
            ("d2h", "jax.experimental.io_callback (operands to host)", big),
            ("d2h", "jax.pure_callback (operands to host)", big),
            ("h2d", "jax.experimental.io_callback (results to device)", big),
            ("h2d", "jax.pure_callback (results to device)", big)]
    with sqlite3.connect(out / "events.sqlite") as conn:
        got = conn.execute(
            "SELECT t.kind, t.api, s.line, count(*), sum(t.bytes), count(DISTINCT t.op_seq) FROM transfers t "
            "LEFT JOIN sites s ON s.id = t.site WHERE t.api LIKE '%callback%' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3").fetchall()
        calls = conn.execute("SELECT s.line, o.seq, o.name FROM ops o JOIN sites s ON s.id = o.site "
                             "WHERE o.kind = 'jit' ORDER BY o.seq").fetchall()
        seqs = conn.execute("SELECT s.line, t.op_seq FROM transfers t JOIN sites s ON s.id = t.site "
                            "WHERE t.api LIKE '%callback%'").fetchall()
    assert got == [(kind, api, line, 1, n, 1) for kind, api, n in legs for line in (19, 20, 21, 22)]
    assert [(line, name) for line, _, name in calls] == [(19, "jit(f)"), (20, "jit(f)"), (21, "jit(g)"), (22, "jit(g)")]
    assert set(seqs) == {(line, seq) for line, seq, _ in calls}
