"""A failure inside the recording never loses or changes the user's result (issue 23).

Before: a hook whose own recording raised after the user's call had returned (a full disk
behind a sink, a bug in a row) raised into the user's program, which lost the result, on
both the C and the Python path. Now the result is returned, the failure is counted on the
recorder (``recording_errors``, the first one's text) and the run goes on. Forced here at
each point of a call (the site lookup before it, each table after it, the per-op callback)
on both paths, in-process on real JAX; then end to end under ``jaxplace run``.
"""
from __future__ import annotations

import collections
import json
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import audit_json, child_env, cli, jaxplace, python

from jaxplace_cli.capture.jaxhooks import dispatch
from jaxplace_cli.capture.jaxhooks.state import CallSpec, active, tls
from jaxplace_cli.capture.recorder import Recorder
from jaxplace_cli.model.events import OP_JIT, OP_JNP

try:
    from jaxplace_cli.capture import _native
except ImportError:
    _native = None

PATHS = {"python": dispatch.python_record_call}
if _native is not None:
    PATHS["native"] = dispatch.configure_native(_native)


class Broken(collections.deque):
    """A recorder table whose append fails, as a sink over a failing writer would."""

    def append(self, row):
        raise OSError(28, "No space left on device")


def _broken_site_of(frame):
    raise KeyError("a site lookup that fails")


def _sabotage(rec: Recorder, where: str) -> None:
    if where == "site":
        rec.site_of = _broken_site_of
    elif where in ("ops", "transfers", "buffers"):
        setattr(rec, where, Broken())
    elif where == "on_dispatch":
        active.on_dispatch = lambda: 1 / 0


class Counted:
    """The user's callable, counting its calls: a failed recording must not run it twice."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def _pair(a, b):
    return a + b, a * b


JITTED_PAIR = jax.jit(_pair)

# where the recording fails -> a call that reaches that point (spec, fn, args)
CALLS = {
    "site": lambda: (CallSpec("sin", OP_JNP), jnp.sin, (jnp.arange(4.0),)),
    "ops": lambda: (CallSpec("sin", OP_JNP), jnp.sin, (jnp.arange(4.0),)),
    "transfers": lambda: (CallSpec("multiply", OP_JNP, scalar_operands=True), jnp.multiply,
                          (jnp.arange(4.0), 0.5)),  # the scalar's upload
    "buffers": lambda: (CallSpec("jit(_pair)", OP_JIT, scalar_operands=True, flatten=True), JITTED_PAIR,
                        (jnp.arange(4.0), jnp.ones(4))),  # two results: buffer rows
    "on_dispatch": lambda: (CallSpec("sin", OP_JNP), jnp.sin, (jnp.arange(4.0),)),
}


def _invoke(record_call, spec, fn, args):
    return record_call(spec, fn, args, {})


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("where", sorted(CALLS))
def test_a_failed_recording_returns_the_users_result(path, where):
    spec, fn, args = CALLS[where]()
    expected = jax.tree_util.tree_map(np.asarray, fn(*args))  # plain JAX, no recorder
    spec, fn, args = CALLS[where]()  # fresh arrays: no buffer id from a previous recording
    user = Counted(fn)
    rec = Recorder()
    previous = active.rec, active.on_dispatch
    active.rec = rec
    _sabotage(rec, where)
    try:
        out = _invoke(PATHS[path], spec, user, args)
    finally:
        active.rec, active.on_dispatch = previous
    assert user.calls == 1
    got = jax.tree_util.tree_map(np.asarray, out)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_array_equal(g, e)
    assert (tls.depth, tls.op) == (0, None)  # the next call records again
    assert rec.recording_errors == 1
    error = {"site": "KeyError: 'a site lookup that fails'", "on_dispatch": "ZeroDivisionError: division by zero"}
    assert rec.first_recording_error.startswith(error.get(where, "OSError: [Errno 28] No space left on device"))
    assert rec.recording_error_line().startswith("1 call could not be recorded (the program's results are unaffected")


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_failed_recording_of_a_failed_call_keeps_the_users_error(path):
    """The call raised and recording that failure raised too: the user's own error stands."""
    rec = Recorder()
    rec.ops = Broken()
    boom = ValueError("the user's own error")

    def fails(x):
        raise boom

    previous, active.rec = active.rec, rec
    try:
        with pytest.raises(ValueError) as info:
            _invoke(PATHS[path], CallSpec("fails", OP_JNP), fails, (jnp.ones(2),))
    finally:
        active.rec = previous
    assert info.value is boom
    assert rec.recording_errors == 1 and rec.first_recording_error.startswith("OSError")


def test_a_recording_error_line_counts_them_all():
    rec = Recorder()
    assert rec.recording_error_line() == ""
    for i in range(3):
        try:
            raise RuntimeError(f"failure {i}\nsecond line")
        except RuntimeError as exc:
            rec.recording_failed(exc)
    assert rec.recording_errors == 3
    assert rec.first_recording_error.startswith("RuntimeError: failure 0 (test_recording_failure.py:")
    assert rec.recording_error_line().startswith("3 calls could not be recorded")


SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from jaxplace_cli.capture.jaxhooks.state import active

    class Broken:
        def append(self, row):
            raise OSError(28, "No space left on device")
        def __len__(self):
            return 0

    if active.rec is not None:  # under jaxplace run: every table of the recorder fails
        active.rec.ops = active.rec.transfers = active.rec.buffers = Broken()
    x = jnp.arange(6.0)
    y = x * 2.5 + 1
    f = jax.jit(lambda a, b: (a @ b, a - b))
    s, d = f(x, jnp.ones(6))
    z = jax.device_put(np.arange(3), jax.devices()[0])
    print(float(y.sum()), float(s), d.tolist(), jax.device_get(z).tolist(), jnp.sin(x)[2].item())
""")


@pytest.mark.parametrize("capture", ["native", "python"])
def test_under_jaxplace_run_the_program_prints_what_python_prints(tmp_path, capture):
    """End to end: every table of the recorder fails from the script's first op on; the
    script's output and exit code are plain python's."""
    script = tmp_path / "broken_sink.py"
    script.write_text(SCRIPT)
    env = child_env(JAXPLACE_CAPTURE=capture)
    plain = python(script, env=env)
    assert plain.returncode == 0, plain.stderr
    run = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "run", script, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout == plain.stdout
    assert "Traceback" not in run.stderr


    # the calls whose recording failed are lost data: run.json counts them, the audit says so
    # and a budget on the run cannot pass (issue 25)
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["events"]["recording_errors"] > 0
    report = audit_json(tmp_path / "run")
    lost = [f for f in report["findings"] if f["rule"] == "recording-incomplete"]
    assert lost and lost[0]["severity"] == "error" and "calls not recorded" in lost[0]["message"]
    code = cli("audit", tmp_path / "run", "--max-d2d", "1000").returncode
    assert code == 1
