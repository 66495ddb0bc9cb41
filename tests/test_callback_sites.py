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
