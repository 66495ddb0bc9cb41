"""The bottom of the script's stack and the edges of its start, as python has them.

Under `python script.py` the script's module frame is the thread's first: its ``f_back`` is
None, a warning whose stacklevel reaches past it is reported at ``sys:1`` and
``traceback.print_stack()`` prints that frame alone. Under `jaxplace run` the runner's frames
sat below it (a warning named ``jaxplace_cli/capture/runner.py``). CPython 3.11 also leaves the
tuple of ``sys.exit((5,))`` raw, and python's exit prints it and exits 1, where a caught
SystemExit has code 5. A file that is not UTF-8 and declares no encoding fails in python's
tokenizer with its own message, not compile's "(unicode error)", and so does one with a NUL
byte. And the runner's frames took 16 levels of the script's recursion limit. The reference
is python itself, run on the same file beside `jaxplace run` (no JAX: the runner's edges)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import child_env, jaxplace, python

# the frame and exit cases are capture/_native.c's (fresh_stack_call, CPython 3.11); the runs
# below take that path even under `make test-python-path`
NATIVE = importlib.util.find_spec("jaxplace_cli.capture._native") is not None and sys.version_info[:2] == (3, 11)

FRAMES = """\
import inspect, logging, sys, traceback, warnings
below = sys._getframe().f_back
print("f_back", below and (below.f_code.co_name, below.f_code.co_filename))
print("stack", [f.function for f in inspect.stack()])
traceback.print_stack()
warnings.warn("top 2", UserWarning, stacklevel=2)
warnings.warn("top 9", UserWarning, stacklevel=9)
def f():
    warnings.warn("in f 3", UserWarning, stacklevel=3)
    traceback.print_stack()
f()
logging.basicConfig(format="%(filename)s:%(lineno)d %(funcName)s %(message)s")
logging.warning("logged")
def deeper(n):
    try:
        return deeper(n + 1)
    except RecursionError:
        return n
print("depth", deeper(0))
sys.setrecursionlimit(60)
print("depth at 60", deeper(0))
"""

# name -> (source, extra arguments of the run); both run from the file's folder
CASES = {
    "frames": (FRAMES.encode(), []),
    "exit_one_tuple": (b"import sys\nsys.exit((5,))\n", []),
    "exit_empty_tuple": (b"import sys\nsys.exit(())\n", []),
    "exit_pair": (b"import sys\nsys.exit((1, 2))\n", []),
    "exit_tuple_caught": (b"import sys\ntry:\n    sys.exit((5,))\nexcept SystemExit as e:\n"
                          b"    print(repr(e.code))\n    raise\n", []),
    # not UTF-8, nothing declared: python names the first bad line, even below a syntax error
    "latin1_undeclared": (b'x = 1\ny = 2\nz = "\xe9"\n', []),
    "syntax_error_then_latin1": (b'x = = 1\ny = 2\nz = "\xe9"\n', []),
    "bad_utf8_sequence": (b'x = "\xed\xa0\x80"\n', []),
    "cookie_below_line_two": (b'# x\n\n\n# coding: latin-1\nx = "\xe9"\n', []),
    # declared: python decodes as told (and fails as compile does where that is wrong)
    "cookie_line_two": (b'#!/usr/bin/env python\n# -*- coding: latin-1 -*-\nprint(repr("\xe9"))\n', []),
    "utf8_cookie_wrong": (b'# coding: utf-8\nz = "\xe9"\n', []),
    "bom_wrong": (b'\xef\xbb\xbfx = "\xe9"\n', []),
    # a NUL byte: python names its line and shows the text before it
    "nul_mid_line": (b"x = 1\ny = 2 \x00 + 3\n", []),
    "nul_below_syntax_error": (b"x = = 1\n\x00\n", []),
    "nul_with_cookie": (b'# coding: latin-1\nx = "\xe9"\ny = 1\x00\n', []),
    "nul_before_bad_byte": (b"x = '\x00\xff'\n", []),
    "bad_byte_in_comment": (b"# \xff comment\nprint(1)\n", []),
    "cr_line_endings": (b"print(1)\rprint(2)\rx = '\xff'\r", []),
    # a limit below the runner's own depth: the script runs (and fails) as under python, and
    # the runner still saves its run after it (it died of RecursionError, the run `running`)
    "tiny_recursion_limit": (b"import sys\nsys.setrecursionlimit(10)\nprint('set')\n", []),
    "tiny_recursion_limit_raises": (b"import sys\nsys.setrecursionlimit(10)\nraise ValueError('x')\n", []),
}


# the cases the C runner makes python's (the others are the tokenizer's words, in Python)
C_RUNNER = {"frames", "exit_one_tuple", "exit_empty_tuple", "exit_pair", "exit_tuple_caught",
            "tiny_recursion_limit", "tiny_recursion_limit_raises"}
assert C_RUNNER <= set(CASES)


def _need_c_runner() -> None:
    if not NATIVE:
        pytest.skip("capture/_native.c is not built here (the runner's frames stay below the script)")


def _both(tmp_path, name, source, extra, stdin=False):
    """(python, jaxplace run) on the file, or on the same bytes through stdin (``-``)."""
    if name in C_RUNNER:
        _need_c_runner()
    script = tmp_path / f"{name}.py"
    script.write_bytes(source)
    target = "-" if stdin else script.name
    env = child_env()
    env.pop("JAXPLACE_CAPTURE", None)
    out = []
    for cmd in ([sys.executable, target],
                [sys.executable, "-m", "jaxplace_cli", "run", "-q", "--no-trace", "--out", str(tmp_path / "run"),
                 *extra, target]):
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, input=source if stdin else None,
                              stdin=None if stdin else subprocess.DEVNULL, capture_output=True, timeout=240)
        out.append(subprocess.CompletedProcess(cmd, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                                               proc.stderr.decode("utf-8", "replace")))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_scripts_bottom_and_start_are_pythons(tmp_path, name):
    source, extra = CASES[name]
    plain, jp = _both(tmp_path, name, source, extra)
    assert (jp.returncode, jp.stdout, jp.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    status = json.loads((tmp_path / "run" / "run.json").read_text())["status"]
    assert status == ("complete" if plain.returncode == 0 else "failed")
    if name == "frames":  # what the comparison stands on, by hand
        assert "f_back None\nstack ['<module>']\n" in plain.stdout and "depth at 60 5" in plain.stdout
        assert "sys:1: UserWarning: top 2" in plain.stderr and "sys:1: UserWarning: top 9" in plain.stderr
        assert "sys:1: UserWarning: in f 3" in plain.stderr and "runner.py" not in jp.stderr
    if name.startswith("exit_") and name != "exit_tuple_caught":
        assert plain.returncode == 1 and plain.stderr.strip() in ("(5,)", "()", "(1, 2)")
    if name == "exit_tuple_caught":
        assert plain.returncode == 5 and plain.stdout == "5\n"
    if name == "bad_byte_in_comment":  # compile() passes it; python's tokenizer does not
        assert plain.returncode == 1 and "Non-UTF-8 code starting with '\\xff'" in plain.stderr
    if name in ("latin1_undeclared", "syntax_error_then_latin1", "cr_line_endings"):
        assert plain.stderr.startswith("SyntaxError: Non-UTF-8 code starting with '\\x") and "on line 3" in plain.stderr
    if name == "nul_mid_line":
        assert plain.stderr.endswith('line 2\n    y = 2 \nSyntaxError: source code cannot contain null bytes\n')


@pytest.mark.parametrize("name", ["frames", "latin1_undeclared", "exit_one_tuple", "nul_mid_line"])
def test_a_script_from_stdin_too(tmp_path, name):
    """`python -` and `jaxplace run -`: the program read from stdin (``<stdin>`` in messages)."""
    source, extra = CASES[name]
    plain, jp = _both(tmp_path, name, source, extra, stdin=True)
    assert (jp.returncode, jp.stdout, jp.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    if name == "latin1_undeclared":  # the bytes themselves went through stdin
        assert "in file <stdin> on line 3, but no encoding declared" in plain.stderr


def test_a_module_run_with_dash_m_has_runpys_frames_below_it_as_under_python(tmp_path):
    _need_c_runner()
    (tmp_path / "bottom_mod.py").write_text(FRAMES)
    env = child_env()
    env.pop("JAXPLACE_CAPTURE", None)
    plain = python("-m", "bottom_mod", cwd=tmp_path, env=env)
    jp = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "run", "-m", "bottom_mod", cwd=tmp_path, env=env)
    assert plain.returncode == 0, plain.stderr
    assert "_run_module_as_main" in plain.stdout  # runpy's frames are the bottom under python -m
    assert (jp.returncode, jp.stdout, jp.stderr) == (plain.returncode, plain.stdout, plain.stderr)
