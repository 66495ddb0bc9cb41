"""The script's frames sit where python puts them (issue 29, bench/README.md round 18).

CPython 3.11 keeps a thread's frames in 16 KiB chunks and unmaps a chunk when the first frame in
it returns, so a call made right at a chunk's end maps and unmaps one each time: where that
happens depends on how deep the stack below is. Under `jaxplace run` the script ran ~12 frames
above where python runs it, and JAX's own import ran one more frame up behind the import hook:
`import jax` mapped and unmapped 1,321 chunks against python's 327 (strace), which cost 0.05 to
0.08 s where munmap is slow. Now the script runs on a chunk of its own from the slot python
uses (capture/_native.c ``fresh_stack_call``), and the hook puts no frame around the body it
waits for (``call_around``). The oracles: python's own stack position, and the kernel's count
of chunk-sized munmaps.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import child_env, jaxplace, python

_native = pytest.importorskip("jaxplace_cli.capture._native")
needs_position = pytest.mark.skipif(not hasattr(_native, "stack_position"),
                                    reason="CPython 3.11 only (capture/_native.c fresh_stack_call)")

PROBE = ("from jaxplace_cli.capture._native import stack_position\n"
         "def f():\n    return stack_position()[1]\n"
         "print(stack_position()[1], f())\n")


@needs_position
@pytest.mark.parametrize("how", ["path", "module", "stdin"])
def test_the_script_runs_where_python_runs_it(tmp_path, how):
    """The slot of the module's frame and of a function's called from it, python's and ours."""
    (tmp_path / "probe.py").write_text(PROBE)
    args = {"path": ["probe.py"], "module": ["-m", "probe"], "stdin": ["-"]}[how]
    stdin = PROBE if how == "stdin" else None
    plain = python(*args, cwd=tmp_path, input=stdin)
    ours = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", *args, cwd=tmp_path, input=stdin)
    assert plain.returncode == ours.returncode == 0, (plain.stderr, ours.stderr)
    slots = [int(x) for x in plain.stdout.split()]
    assert len(slots) == 2 and slots[1] > slots[0] > 0, plain.stdout
    assert ours.stdout == plain.stdout


def _chunk_unmaps(cmd: list[str], cwd) -> int:
    """munmap calls of one 16 KiB stack chunk between the script's two getresuid() marks."""
    out = subprocess.run(["strace", "-o", "/dev/stderr", "-e", "trace=munmap,getresuid", *cmd], cwd=cwd,
                         env=child_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    marks, n = 0, 0
    for line in out.stderr.splitlines():
        if line.startswith("getresuid("):
            marks += 1
        elif marks == 1 and line.startswith("munmap(") and ", 16384)" in line:
            n += 1
    assert marks == 2, out.stderr[-2000:]
    return n


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
@needs_position
def test_import_jax_maps_no_more_stack_chunks_than_under_python(tmp_path):
    script = tmp_path / "imp.py"
    script.write_text("import os\nimport numpy\nos.getresuid()\nimport jax\nos.getresuid()\n")
    plain = _chunk_unmaps([sys.executable, str(script)], tmp_path)
    ours = _chunk_unmaps([sys.executable, "-m", "jaxplace_cli", "run", "-q", "--no-trace", "--out",
                          str(tmp_path / "r"), str(script)], tmp_path)
    # 327 and 1,321 before; python's count is the bound (jaxplace loaded some of JAX's standard
    # modules earlier, so it may import fewer and cross fewer)
    assert plain > 0 and ours <= plain + plain // 10, (plain, ours)


FLAKY = """import os, sys
print("finder in meta_path during the body:",
      any(type(f).__name__ == "_AfterImport" for f in sys.meta_path))
if not os.path.exists("ok"):
    open("ok", "w").close()
    raise RuntimeError("first import fails")
"""
DRIVER = """import sys
from jaxplace_cli.capture.import_hook import after_import
calls = []
after_import("flaky", lambda: calls.append(1))
try:
    import flaky
except RuntimeError as exc:
    print("failed:", exc, "| watched again:", any(type(f).__name__ == "_AfterImport" for f in sys.meta_path))
import flaky
print("callback calls:", len(calls), "| finder left:", any(type(f).__name__ == "_AfterImport" for f in sys.meta_path))
"""


@pytest.mark.parametrize("capture", ["native", "python"])
def test_a_failed_import_is_watched_again(tmp_path, capture):
    """The hook's finder steps out of sys.meta_path while the module's body runs, and back in
    when the body raises, so a second import still runs the callback (once)."""
    (tmp_path / "flaky.py").write_text(FLAKY)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = child_env(**({"JAXPLACE_CAPTURE": "python"} if capture == "python" else {}))
    out = python("driver.py", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "finder in meta_path during the body: False",
        "failed: first import fails | watched again: True",
        "finder in meta_path during the body: False",
        "callback calls: 1 | finder left: False",
    ]


def test_the_hook_finds_itself_in_meta_path_by_identity(tmp_path, monkeypatch):
    """Stepping aside for the body, the hook's finder looks for itself by identity: a finder of
    the user's ahead of it whose ``__eq__`` raises (list.index would call it) must not fail the
    import it waits for."""
    import importlib.abc

    from jaxplace_cli.capture.import_hook import after_import

    class Touchy(importlib.abc.MetaPathFinder):
        def find_spec(self, *args):
            return None

        def __eq__(self, other):
            raise RuntimeError("compared")

        __hash__ = object.__hash__

    (tmp_path / "touchy_target.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delitem(sys.modules, "touchy_target", raising=False)
    calls = []
    after_import("touchy_target", lambda: calls.append(1))
    sys.meta_path.insert(0, Touchy())  # ahead of the hook's finder
    import touchy_target

    assert (touchy_target.X, calls) == (1, [1])
    monkeypatch.delitem(sys.modules, "touchy_target")
