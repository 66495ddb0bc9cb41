"""With stderr closed (``2>&-``), jaxplace's own lines go nowhere (issue 25, item 7).

Python then starts with ``sys.stderr`` None, and ``print(..., file=None)`` writes to stdout: the
start line, the run summary, the budget verdict, ``sys.exit("text")``'s text and the one-line
error of a bad command line all went into the script's stdout. Each case runs a real
subprocess whose fd 2 is closed before exec (``stderr=DEVNULL`` would be an open file), and
python running the same script the same way is the oracle for stdout and the exit code.
"""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import child_env


def _closed_stderr():
    os.close(2)


def _run(*args, cwd):
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=child_env(), stdout=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, preexec_fn=_closed_stderr, timeout=180)
    return proc.returncode, proc.stdout.decode()


SCRIPT = """\
import sys
import jax.numpy as jnp
print("sum", float(jnp.ones(3).sum()))
if sys.argv[1:] == ["exit"]:
    sys.exit("bye from the script")
if sys.argv[1:] == ["raise"]:
    raise ValueError("boom")
"""


def test_jaxplace_lines_never_reach_stdout_when_stderr_is_closed(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    (tmp_path / "b.toml").write_text("[d2h]\ncount = 0\n")  # the float() is one d2h: exceeded
    for i, (opts, arg) in enumerate([((), "ok"), ((), "exit"), ((), "raise"),
                                     (("--budget", "b.toml"), "ok")]):
        want = _run("s.py", arg, cwd=tmp_path)
        assert want[1] == "sum 3.0\n", want
        got = _run("-m", "jaxplace_cli", "run", "--trace", "off", "--out", f"r{i}", *opts, "s.py", arg,
                   cwd=tmp_path)
        if opts:  # the budget's exit 1, said nowhere
            want = (1, want[1])
        assert got == want, (opts, arg)
        assert (tmp_path / f"r{i}" / "run.json").is_file()
    # a bad command line: exit 2, its one line nowhere
    assert _run("-m", "jaxplace_cli", "run", "--trace", "bogus", "s.py", cwd=tmp_path) == (2, "")
    assert _run("-m", "jaxplace_cli", "audit", "no-such-run", cwd=tmp_path) == (2, "")


def test_launch_with_stderr_closed_prints_only_the_processes_stdout(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    code, out = _run("-m", "jaxplace_cli", "launch", "-n", "1", "--trace", "off", "--out", "job", "s.py",
                     "raise", cwd=tmp_path)
    assert (code, out) == (1, "[p0] sum 3.0\n")
    assert (tmp_path / "job" / "job.json").is_file()
