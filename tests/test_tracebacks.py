"""Tracebacks as python's (issue 25, item 6): no jaxplace frame in any traceback the user sees.

An exception raised inside a host callback passed through jaxplace's callback hooks: JAX logs
it ("jax.pure_callback failed" and its traceback) and XLA formats the whole stack into its
own error's message, so 12-13 jaxplace frames showed (the runner, the session, the hooks,
runpy). Each case runs the same script under python and under ``jaxplace run -q``: stderr,
stdout and the exit code must be python's, byte for byte. The standard library's frames
stay (python shows a json error's own frames; the runner used to cut every frame under
runpy's directory, which is the standard library's).
"""
from __future__ import annotations

import pytest
from conftest import jaxplace, python

SCRIPT = """\
import sys
import jax
import jax.numpy as jnp
from jax.experimental import io_callback

kind, where = sys.argv[1], sys.argv[2]


def host(x):
    if kind == "exit":
        sys.exit(3)
    if kind == "interrupt":
        raise KeyboardInterrupt
    raise ValueError("bad value in the callback")


x = jnp.ones(3)
out = jax.ShapeDtypeStruct((3,), jnp.float32)
print("before", flush=True)
if where == "pure":
    jax.pure_callback(host, out, x)
elif where == "jit":
    jax.jit(lambda x: jax.pure_callback(host, out, x))(x).block_until_ready()
elif where == "debug":
    jax.debug.callback(host, x)
    jax.effects_barrier()
else:
    io_callback(host, out, x)
print("after")
"""


@pytest.mark.parametrize("kind,where", [("raise", "pure"), ("raise", "jit"), ("raise", "debug"),
                                        ("exit", "pure"), ("interrupt", "io")])
def test_an_exception_in_a_host_callback_reads_as_pythons(tmp_path, kind, where):
    script = tmp_path / "callbacks.py"
    script.write_text(SCRIPT)
    want = python(script, kind, where, cwd=tmp_path)
    got = jaxplace("run", "-q", "--trace", "off", "--out", tmp_path / "run", script, kind, where, cwd=tmp_path)
    assert "Traceback (most recent call last):" in want.stderr  # the case shows a traceback
    assert "jaxplace_cli" not in got.stderr and "<frozen runpy>" not in got.stderr
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


def test_the_standard_library_frames_stay(tmp_path):
    script = tmp_path / "bad_json.py"
    script.write_text("import json\njson.loads('{')\n")
    want = python(script, cwd=tmp_path)
    got = jaxplace("run", "-q", "--trace", "off", "--out", tmp_path / "run", script, cwd=tmp_path)
    assert "json/decoder.py" in want.stderr
    assert (got.returncode, got.stderr) == (want.returncode, want.stderr)


def test_an_exception_from_the_scripts_signal_handler(tmp_path):
    """The handler runs wherever the main thread is when the signal comes — in JAX, or in a
    jaxplace hook under recording: the frames python would show (the script's, JAX's, the
    handler's), never a hook's. Where it lands varies, so the frames are compared, not the
    text: the first (the loop) and the last (the handler) are python's."""
    script = tmp_path / "handler.py"
    script.write_text(
        "import os, signal, threading\n"
        "import jax.numpy as jnp\n"
        "class Stop(Exception):\n"
        "    pass\n"
        "def handler(signum, frame):\n"
        "    raise Stop('stopped by SIGUSR1')\n"
        "signal.signal(signal.SIGUSR1, handler)\n"
        "x = jnp.ones(4)\n"
        "threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1)).start()\n"
        "for i in range(10**7):\n"
        "    x = x + 1\n"
        "print('not interrupted')\n")
    want = python(script, cwd=tmp_path)
    got = jaxplace("run", "-q", "--trace", "off", "--out", tmp_path / "run", script, cwd=tmp_path)
    assert (got.returncode, got.stdout) == (want.returncode, want.stdout) == (1, "")
    assert "jaxplace_cli" not in got.stderr

    def frames(text):
        return [line.strip() for line in text.splitlines() if line.startswith('  File "')]

    g, w = frames(got.stderr), frames(want.stderr)
    assert (g[0], g[-1]) == (w[0], w[-1])
    assert all("/jax/" in f for f in g[1:-1]), g
    assert got.stderr.splitlines()[-1] == want.stderr.splitlines()[-1] == "Stop: stopped by SIGUSR1"
