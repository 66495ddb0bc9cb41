"""Issue 24 item 4: names as the user wrote them.

A jitted function wrapped by a library (``eqx.filter_jit``, ``nnx.jit``) or by the user
(``functools.wraps`` chains, ``jax.jit(partial(...))``) is recorded under the user's function
name; a final call of the step function after the loop is no training step; library frames are
told from JAX's own even where site-packages lies inside the standard library's directory.
Real programs, recorded with ``jaxplace run``; expected names and counts read off the scripts.
"""
from __future__ import annotations

import sqlite3
import textwrap

import pytest
from conftest import audit_json, jaxplace

from jaxplace_cli.capture.recorder import INTERNAL, LIBRARY, USER, Recorder

PROGRAM = """\
import functools
import jax, jax.numpy as jnp
import equinox as eqx
from flax import nnx

@eqx.filter_jit
def make_step(w, x):
    return w - 0.1 * jnp.sum(w * x)

@eqx.filter_jit
def evaluate(w, x):
    return jnp.sum(w * x)

def deco(f):
    @functools.wraps(f)
    def inner(*a):
        return f(*a)
    return inner

@jax.jit
@deco
def doubled(x):
    return x * 2

@jax.jit
@deco
def tripled(x):
    return x * 3

def scaled(x, k):
    return x * k

@nnx.jit
def nnx_step(x):
    return x + 1

part = jax.jit(functools.partial(scaled, k=3.0))
w = jnp.ones(4)
x = jnp.ones(4)
for i in range(6):
    w = make_step(w, x)
final = make_step(w, x)  # the trained model used once more: no step 7
print(float(evaluate(final, x)), float(doubled(x).sum()), float(tripled(x).sum()),
      float(part(x).sum()), float(nnx_step(x).sum()))
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    script = root / "prog.py"
    script.write_text(textwrap.dedent(PROGRAM))
    out = root / "run"
    proc = jaxplace("run", "--devices", 1, "--no-trace", "--quiet", "--out", out, script)
    assert proc.returncode == 0, proc.stderr
    return out


def test_library_wrapped_jit_functions_keep_the_users_names(recorded):
    with sqlite3.connect(recorded / "events.sqlite") as conn:
        names = dict(conn.execute("SELECT name, count(*) FROM ops WHERE kind = 'jit' GROUP BY name"))
    assert names == {"jit(make_step)": 7, "jit(evaluate)": 1, "jit(doubled)": 1, "jit(tripled)": 1,
                     "jit(scaled)": 1, "jit(nnx_step)": 1}


def test_a_final_call_after_the_loop_is_no_step(recorded):
    steps = audit_json(recorded)["steps"]
    assert (steps["method"], steps["detail"], steps["count"]) == ("repeated jit call", "jit(make_step)", 6)


def test_the_most_specific_directory_decides_a_frames_tier():
    # a system/conda Python: site-packages inside the standard library's directory
    rec = Recorder()
    rec._internal = ("/py/lib/python3.11/", "/py/lib/python3.11/site-packages/jax/")
    rec._library = ("/py/lib/python3.11/site-packages/",)

    def tier(path):
        return rec._tier(compile("pass", path, "exec"))

    assert tier("/py/lib/python3.11/json/decoder.py") == INTERNAL
    assert tier("/py/lib/python3.11/site-packages/jax/_src/api.py") == INTERNAL
    assert tier("/py/lib/python3.11/site-packages/numpyro/diagnostics.py") == LIBRARY
    assert tier("/home/me/train.py") == USER


AOT = """\
import jax, jax.numpy as jnp
import equinox as eqx

def f(x):
    return x * 2

def make():
    def f(x):
        return x + 1
    return jax.jit(f)

g, h = jax.jit(f), make()
cg, ch = g.lower(jnp.ones(4)).compile(), h.lower(jnp.ones(4)).compile()
ce = eqx.filter_jit(f).lower(jnp.ones(4)).compile()
for _ in range(2):
    cg(jnp.ones(4)), ch(jnp.ones(4)), g(jnp.ones(4)), h(jnp.ones(4)), ce(jnp.ones(4))
"""


def test_ahead_of_time_calls_have_their_functions_jit_names(tmp_path):
    """Two functions named ``f`` (lines 4 and 8), each jitted, compiled ahead of time and called
    both ways: a compiled call is named as its function's jit calls (the second ``f`` with its
    script's name and line 8); both compiled calls were ``jit(f)``, one function to steps and
    recompiles. equinox compiles every ``filter_jit`` function at one place of its own, where
    its own helper is jitted too: the first ``f`` compiled through it stays ``jit(f)`` (a review
    saw ``jit(branched_error_if_impl)``)."""
    script = tmp_path / "aot.py"
    script.write_text(AOT)
    out = tmp_path / "run"
    proc = jaxplace("run", "--no-trace", "--quiet", "--out", out, script)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(out / "events.sqlite") as conn:
        names = [n for (n,) in conn.execute("SELECT name FROM ops WHERE kind = 'jit' ORDER BY seq")]
    assert names == ["jit(f)", "jit(f) [aot.py:8]", "jit(f)", "jit(f) [aot.py:8]", "jit(f)"] * 2
