"""`jaxplace run` behaves like `python`: output, exit code, __name__, argv, sys.path[0], cwd,
exceptions, SystemExit and Ctrl-C — and the recording survives every one of them."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import SCRIPTS, audit_json, child_env, cli, jaxplace, python


def _run_both(tmp_path, script, *args, cwd=None):
    plain = python(script, *args, cwd=cwd)
    jp = jaxplace("run", "--quiet", "--no-trace", "--out", tmp_path / "run", script, *args, cwd=cwd)
    return plain, jp


def test_same_name_argv_path_cwd_and_output(tmp_path):
    script = SCRIPTS / "show_env.py"
    plain, jp = _run_both(tmp_path, script, "--flag", "value", "-x", cwd=tmp_path)
    assert jp.returncode == plain.returncode == 0
    assert jp.stdout == plain.stdout
    assert jp.stderr == plain.stderr == "to stderr\n"
    seen = json.loads(jp.stdout)
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(script), "--flag", "value", "-x"]
    assert seen["path0"] == str(SCRIPTS)
    assert seen["cwd"] == str(tmp_path)


def test_a_script_that_uses_no_device_gets_no_backend_started(tmp_path):
    """The run's end asks the devices for their memory statistics only where a backend was
    started: asking started one (JAX's CPU client here, seconds on an accelerator) after a
    script that never used a device. Its atexit, run after jaxplace's end, sees what python's does."""
    plain, jp = _run_both(tmp_path, SCRIPTS / "no_device.py", cwd=tmp_path)
    assert plain.stdout == "backend started by the end: False\n", plain.stderr[-2000:]
    assert (jp.returncode, jp.stdout) == (0, plain.stdout), jp.stderr[-2000:]


def test_a_jax_variable_the_script_sets_before_importing_jax_applies(tmp_path):
    """`os.environ["JAX_ENABLE_X64"] = "1"` before `import jax`: x64 on under python, and under
    jaxplace run, which hooks JAX as the script imports it (it imported JAX before the script
    and gave float32: capture/session.py); and no numpy before the script either (the command
    line's trace modes imported the hooks' package, which imports numpy: capture/trace_modes.py)."""
    plain, jp = _run_both(tmp_path, SCRIPTS / "env_before_import.py", cwd=tmp_path)
    assert plain.stdout == "imported before the script: []\nx64: True float64\n", plain.stderr[-2000:]
    assert (jp.returncode, jp.stdout) == (0, plain.stdout), jp.stderr[-2000:]
    # with a policy too: its engine imports JAX, so it is built as the script's import completes
    # (it was built before the script: float32); it then places the script's ops
    rr = jaxplace("run", "--quiet", "--no-trace", "--devices", "2", "--policy", "rr", "--out", tmp_path / "rr",
                  SCRIPTS / "env_before_import.py", cwd=tmp_path)
    assert (rr.returncode, rr.stdout) == (0, plain.stdout), rr.stderr[-2000:]
    placement = json.loads((tmp_path / "rr" / "run.json").read_text())["placement"]
    assert placement["policy"] == "rr" and placement["decisions"] >= 1, placement


def test_a_script_that_never_imports_jax_gets_none_imported(tmp_path):
    """The recording starts when the script imports JAX: a script that does not gets no JAX
    from jaxplace, not even at the run's end (the devices' description imported it, and the
    hooks' package numpy, ~80 ms of a non-JAX script's run); and JAX
    imported after the run was saved (an atexit) starts no recording into the closed store."""
    plain, jp = _run_both(tmp_path, SCRIPTS / "jax_at_exit.py", cwd=tmp_path)
    assert plain.stdout == "jax imported by the end: False numpy: False\nlate: 3.0\n", plain.stderr[-2000:]
    assert (jp.returncode, jp.stdout, jp.stderr) == (0, plain.stdout, plain.stderr)
    m = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (m["status"], m["jax_version"], m["events"]["ops"]) == ("complete", None, 0)


def test_relative_script_path_like_python(tmp_path):
    plain = python("scripts/show_env.py", "a", cwd=SCRIPTS.parent)
    jp = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", "scripts/show_env.py", "a", cwd=SCRIPTS.parent)
    assert json.loads(jp.stdout) == json.loads(plain.stdout)


def test_run_module_like_python_dash_m(tmp_path):
    env = child_env(PYTHONPATH=str(SCRIPTS))
    plain = subprocess.run([sys.executable, "-m", "pkgmod", "one", "--two"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    jp = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", "-m", "pkgmod", "one", "--two",
                  cwd=tmp_path, env=env)
    assert jp.returncode == plain.returncode == 0, jp.stderr
    assert jp.stdout == plain.stdout
    seen = json.loads(jp.stdout.splitlines()[0])
    assert seen["name"] == "__main__" and seen["argv_rest"] == ["one", "--two"]
    assert seen["path0"] == str(tmp_path)
    assert audit_json(tmp_path / "r")["ops"]["total"] >= 2  # arange + sum


@pytest.mark.parametrize("code", [3, 0, 42])
def test_exit_code_preserved_and_run_saved(tmp_path, code):
    plain, jp = _run_both(tmp_path, SCRIPTS / "exit_code.py", str(code))
    assert plain.returncode == code
    assert jp.returncode == code
    assert jp.stdout == plain.stdout
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["exit_code"] == code
    assert manifest["status"] == ("complete" if code == 0 else "failed")
    r = audit_json(tmp_path / "run")
    assert r["run"]["exit_code"] == code
    assert r["ops"]["total"] >= 3  # ones, multiply, sum


def test_exit_with_message(tmp_path):
    plain, jp = _run_both(tmp_path, SCRIPTS / "exit_message.py")
    assert plain.returncode == jp.returncode == 1
    assert jp.stderr == plain.stderr == "stopping: bad configuration\n"


@pytest.mark.parametrize("script", ["raises.py", "raises_in_jit.py"])
def test_exception_traceback_identical_to_python(tmp_path, script):
    plain, jp = _run_both(tmp_path, SCRIPTS / script)
    assert plain.returncode == jp.returncode == 1
    assert jp.stdout == plain.stdout
    assert jp.stderr == plain.stderr
    assert "jaxplace" not in jp.stderr
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["exit_code"] == 1
    assert audit_json(tmp_path / "run")["run"]["status"] == "failed"


def _start_and_signal(tmp_path, sig, *cmd):
    proc = subprocess.Popen(list(cmd), env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    line = proc.stdout.readline()
    assert line.strip() == "ready", proc.stderr.read() if proc.poll() is not None else line
    time.sleep(0.3)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_ctrl_c_exits_like_python_and_keeps_data(tmp_path):
    script = str(SCRIPTS / "sleeps.py")
    plain_rc, plain_err = _start_and_signal(tmp_path, signal.SIGINT, sys.executable, script)
    rc, err = _start_and_signal(tmp_path, signal.SIGINT, sys.executable, "-m", "jaxplace_cli", "run",
                                "--quiet", "--no-trace", "--out", str(tmp_path / "run"), script)
    assert plain_rc == rc == -signal.SIGINT  # the shell shows 130
    assert err.splitlines()[-1] == plain_err.splitlines()[-1] == "KeyboardInterrupt"
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["exit_code"] == 130
    r = audit_json(tmp_path / "run")
    assert r["ops"]["total"] >= 40  # 20 x (matmul + multiply) before "ready"


def test_sigterm_saves_the_run_and_dies_like_python(tmp_path):
    script = str(SCRIPTS / "sleeps.py")
    plain_rc, _ = _start_and_signal(tmp_path, signal.SIGTERM, sys.executable, script)
    rc, _ = _start_and_signal(tmp_path, signal.SIGTERM, sys.executable, "-m", "jaxplace_cli", "run",
                              "--quiet", "--no-trace", "--out", str(tmp_path / "run"), script)
    assert plain_rc == rc == -signal.SIGTERM
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "terminated"
    assert audit_json(tmp_path / "run")["ops"]["total"] >= 40


def test_sigkill_leaves_an_auditable_incomplete_run(tmp_path):
    script = str(SCRIPTS / "sleeps.py")
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "run", "--quiet", "--no-trace",
                             "--out", str(tmp_path / "run"), script], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # > the writer's 0.25 s flush interval
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    r = audit_json(tmp_path / "run")
    assert r["run"]["status"] == "running"
    assert any("incomplete" in n for n in r["notes"])
    assert r["ops"]["total"] >= 40


def test_summary_names_the_audit_command(tmp_path):
    proc = jaxplace("run", "--no-trace", "--out", tmp_path / "run", SCRIPTS / "exit_code.py", "0")
    assert proc.returncode == 0
    assert f"jaxplace audit {tmp_path / 'run'}" in proc.stderr
    assert proc.stdout.startswith("before exit")


def test_default_out_dir_is_unique_and_never_overwritten(tmp_path):
    for _ in range(2):
        proc = jaxplace("run", "-q", "--no-trace", SCRIPTS / "exit_code.py", "0", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    runs = sorted((tmp_path / "jaxplace-runs").iterdir())
    assert len(runs) == 2 and all(r.name.startswith("exit_code-") for r in runs)


def test_a_traceback_entry_without_a_line_survives_the_frame_stripping():
    """On Python 3.11 a traceback entry at an instruction with no line has tb_lineno None (a
    Ctrl-C can land on one: test_faults' random Ctrl-C hit it once in ~900 runs, exit 3 with
    "'NoneType' object cannot be interpreted as an integer"). Stripping jaxplace's frames keeps
    such an entry, still without a line, and drops only the frames under the given prefix."""
    import sys
    import types

    from jaxplace_cli.capture.frames import without

    here = sys._getframe()
    no_line = types.TracebackType(None, here, 10**6, -1)  # past the code: no line for it
    if no_line.tb_lineno is not None:
        pytest.skip("this Python gives every instruction a line")
    ours = types.TracebackType(no_line, here, 0, 7)
    kept = without(ours, (here.f_code.co_filename + "-not-this-file",))
    assert (kept.tb_lineno, kept.tb_next.tb_lineno, kept.tb_next.tb_lasti) == (7, None, 10**6)
    assert without(ours, (here.f_code.co_filename,)) is None


def _own_lines_out(text: str) -> str:
    return "".join(line for line in text.splitlines(True) if not line.startswith("jaxplace:"))


def _layout(tmp_path):
    """Scripts that python runs in ways jaxplace got wrong (each checked by hand against python)."""
    import zipfile

    (tmp_path / "late_mod.py").write_text("VALUE = 42\n")
    (tmp_path / "atexit_late.py").write_text(
        "import atexit, sys, threading, time\n"
        "@atexit.register\n"
        "def save():\n"
        "    import late_mod\n"
        "    print('atexit', late_mod.VALUE, sys.argv[1:], sys.path[0].endswith('atexit_case'))\n"
        "def late():\n"
        "    time.sleep(0.2)\n"
        "    print('thread', sys.argv[1:])\n"
        "threading.Thread(target=late).start()\n"
        "print('main done')\n")
    real, link = tmp_path / "realdir", tmp_path / "linkdir"
    real.mkdir()
    link.mkdir()
    (real / "helpmod.py").write_text("V = 'real helper'\n")
    (real / "real.py").write_text("import sys, helpmod\nprint(sys.argv[0], __file__.endswith('link.py'), helpmod.V)\n")
    (link / "link.py").symlink_to(real / "real.py")
    (tmp_path / "dot.py").write_text("import sys\nprint(sys.argv[0], __file__, sorted(globals()), __annotations__)\n"
                                     "raise ValueError('x')\n")
    with zipfile.ZipFile(tmp_path / "app.pyz", "w") as z:
        z.writestr("__main__.py", "import sys\nprint('zipapp', sys.argv[1:], sys.path[0].endswith('app.pyz'))\n")
    (tmp_path / "appdir").mkdir()
    (tmp_path / "appdir" / "__main__.py").write_text(
        "import sys, os\nprint(os.path.isabs(sys.path[0]), sys.argv, [k for k in globals() if k[:2] != '__'])\n")
    (tmp_path / "exit_true.py").write_text("import sys\nprint('bye')\nsys.exit(True)\n")
    (tmp_path / "raises_mod.py").write_text("def f():\n    raise KeyError('k')\nf()\n")
    (tmp_path / "own_runpy.py").write_text("import runpy\nrunpy.run_path('raises_mod.py')\n")
    (tmp_path / "chain.py").write_text(
        "import jax.numpy as jnp\nx = jnp.ones(3)\nx.delete()\ntry:\n    x.block_until_ready()\n"
        "except RuntimeError as e:\n    raise ValueError('wrapped') from e\n")
    (tmp_path / "mainmod.py").write_text(
        "import atexit, sys\nX = 'mine'\nprint(sorted(globals()))\n"
        "atexit.register(lambda: print('atexit', getattr(sys.modules['__main__'], 'X', 'missing')))\n"
        "def f():\n    raise KeyError('k')\nf()\n")


@pytest.mark.parametrize("argv", [["atexit_late.py", "a"], ["linkdir/link.py"], ["./dot.py"], ["app.pyz", "z"],
                                  ["appdir"], ["exit_true.py"], ["-m", "mainmod"], ["own_runpy.py"], ["chain.py"]],
                         ids=lambda a: " ".join(a))
def test_runs_like_python_after_the_body_and_for_unusual_paths(tmp_path, argv):
    """What a script sees after its body returns (atexit, a thread still running: the script's
    argv and sys.path[0], not jaxplace's), a symlinked script (sys.path[0] is its real directory),
    `./dot.py` (argv[0], __file__ and the traceback's path as typed), a zip app, a directory
    (an absolute sys.path[0]), sys.exit(True) (exit 1, an int in run.json), the names of a
    script's globals (`__annotations__` was missing) and a `-m` module's namespace, which stays
    `sys.modules["__main__"]` for its atexit handlers (they saw jaxplace's), and tracebacks: a
    `-m` module's and the script's own `runpy.run_path` keep runpy's entries as python shows
    them (jaxplace dropped every runpy entry), a cause raised through a hook loses the hook's
    (`capture/jaxhooks/transfers.py` showed): stdout, stderr and the exit code are python's."""
    case = tmp_path / "atexit_case"
    case.mkdir()
    _layout(case)
    plain = python(*argv, cwd=case)
    jp = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", *argv, cwd=case)
    assert jp.returncode == plain.returncode, (jp.stderr, plain.stderr)
    assert jp.stdout == plain.stdout
    assert _own_lines_out(jp.stderr) == plain.stderr
    m = json.loads((tmp_path / "r" / "run.json").read_text())
    assert m["exit_code"] == plain.returncode and type(m["exit_code"]) is int


ENDINGS = {
    "hook_raises": 'import sys\ndef hook(t, v, tb): raise RuntimeError("hook broke")\nsys.excepthook = hook\n'
                   'print("out1")\nraise ValueError("orig")\n',
    "hook_none": 'import sys\nprint("out1")\nsys.excepthook = None\nraise ValueError("orig")\n',
    "hook_deleted": 'import sys\nprint("out1")\ndel sys.excepthook\nraise ValueError("orig")\n',
    "hook_exits": 'import sys\ndef hook(t, v, tb): sys.exit(5)\nsys.excepthook = hook\nprint("out1")\nraise ValueError("orig")\n',
    "str_fails": 'class W(Exception):\n    def __str__(self): raise RuntimeError("no")\nprint("out1")\nraise W()\n',
    "exit_message": 'print("out1")\nimport sys\nsys.exit("exit message")\n',
    "partial_line": 'import sys\nsys.stdout.write("partial no newline")\nraise RuntimeError\n',
    # python writes the message to fd 2 once sys.stderr is None; neither it nor jaxplace's lines
    # go through the script's print
    "exit_print_replaced_stderr_none": 'import builtins, sys\n_p = builtins.print\n'
                                       'builtins.print = lambda *a, **k: _p("[app]", *a, **k)\nprint("out1")\n'
                                       'sys.stderr = None\nsys.exit("fatal")\n',
    "stderr_replaced": 'import sys\nsys.stderr = open(sys.argv[1], "w")\nprint("script log line", file=sys.stderr)\n'
                       'import jax.numpy as jnp\nprint(float(jnp.ones(2).sum()))\n',
}


@pytest.mark.parametrize("name", sorted(ENDINGS))
def test_endings_print_as_python_does(tmp_path, name):
    """Stdout and stderr into one file, stdout buffered (no PYTHONUNBUFFERED): the script's
    pending output comes before the traceback or exit message as under python; a failing,
    cleared or deleted sys.excepthook and an exception whose str() fails are reported as python
    reports them (they were jaxplace internal errors, exit 3); a script that points sys.stderr
    at its own log file gets none of jaxplace's lines in it."""
    script = tmp_path / f"{name}.py"
    script.write_text(ENDINGS[name])
    env = child_env()
    env.pop("PYTHONUNBUFFERED", None)
    got = {}
    for who, cmd in (("python", [sys.executable, str(script)]),
                     ("jaxplace", [sys.executable, "-m", "jaxplace_cli", "run", "--no-trace", "--out",
                                   str(tmp_path / "r"), str(script)])):
        log = tmp_path / f"{who}.log"
        with open(tmp_path / f"{who}.out", "w") as out:
            rc = subprocess.run([*cmd, str(log)], stdout=out, stderr=subprocess.STDOUT, env=env, timeout=240).returncode
        text = (tmp_path / f"{who}.out").read_text()
        got[who] = (rc, _own_lines_out(text), log.read_text() if log.exists() else None)
    assert got["jaxplace"] == got["python"]


def test_wrapped_jax_functions_keep_their_own_attributes(tmp_path):
    """jnp.sin.lower(x), eval_shape, trace, clear_cache, a custom_jvp's defjvp: the recording
    wrappers hand every attribute they lack to the function they wrap (AttributeError before);
    the output is python's."""
    script = tmp_path / "attrs.py"
    script.write_text(
        "import jax, jax.numpy as jnp\nx = jnp.ones(3)\n"
        "print(type(jnp.sin.lower(x)).__name__, jnp.sin.eval_shape(x).shape, callable(jnp.sin.clear_cache))\n"
        "print(callable(jax.nn.relu.defjvp), callable(jax.nn.relu.defjvps), type(jnp.matmul.trace(x, x)).__name__)\n"
        "print(jnp.linalg.norm.lower(x).as_text()[:10], jax.nn.silu.lower(x).compile() is not None)\n")
    plain, jp = _run_both(tmp_path, script)
    assert jp.returncode == plain.returncode == 0, jp.stderr
    assert jp.stdout == plain.stdout


def test_pythonsafepath_adds_nothing_to_sys_path_as_under_python(tmp_path):
    """PYTHONSAFEPATH=1: python puts neither the script's directory nor the cwd (-m) first on
    sys.path; jaxplace replaced the first entry (the standard library's zip) with it, so a
    module beside the script was imported, defeating the setting."""
    (tmp_path / "helper.py").write_text("X = 1\n")
    script = tmp_path / "safe.py"
    script.write_text("import sys\nprint(sys.path[0])\ntry:\n    import helper\n    print('helper imported')\n"
                      "except ModuleNotFoundError:\n    print('no helper')\n")
    env = child_env(PYTHONSAFEPATH="1")
    plain = python(script, env=env, cwd=tmp_path)
    jp = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", script, env=env, cwd=tmp_path)
    assert jp.returncode == plain.returncode == 0, jp.stderr
    assert jp.stdout == plain.stdout and "no helper" in plain.stdout


TRANSPARENT = """import functools, inspect, os, pickle, sys, weakref
from concurrent.futures import ProcessPoolExecutor
import jax, jax.numpy as jnp
print(sys.orig_argv[1:])
try:
    print(os.wait())
except ChildProcessError:
    print('no child to wait for')
if __name__ == '__main__':  # first: a fork after JAX started its runtime can deadlock (python too)
    with ProcessPoolExecutor(1) as ex:
        print(round(float(ex.submit(jax.nn.gelu, 1.0).result()), 4))
class Model:
    @functools.partial(jax.jit, static_argnums=0)
    def step(self, x): return x * 2
    def __hash__(self): return 1
    def __eq__(self, o): return isinstance(o, Model)
m = Model()
b = m.step
print(m.step(jnp.ones(2)), type(b).__name__, inspect.ismethod(b), b.__name__, b == m.step, b.__self__ is m)
print(weakref.WeakMethod(m.step)() == m.step, b._cache_size(), m.step.lower(m, jnp.ones(2)).as_text()[:11])
fs = (jax.nn.gelu, jax.nn.softmax, jax.random.normal, jax.scipy.special.erf, jnp.fft.fft, jnp.sum)
print([pickle.loads(pickle.dumps(f)) is f for f in fs])
print(jax.nn.silu is jax.nn.swish, jax.nn.tanh is jnp.tanh, {jax.nn.silu: 'silu'}.get(jax.nn.swish))
jax.config.update('jax_explain_cache_misses', True)
f = jax.jit(lambda x: x * 2)
f(jnp.ones(3))
f(jnp.ones(4))
"""


def test_wrapped_jax_objects_behave_as_under_python(tmp_path):
    """One script against python (fewer processes: the suite's time is their JAX imports):
    - sys.orig_argv is the script's command line (it was jaxplace's: a script re-executing
      itself with os.execv(sys.executable, sys.orig_argv) re-ran jaxplace into its --out);
    - a `functools.partial(jax.jit, static_argnums=0)` method read from an instance is a bound
      method (`__name__`, `==`, ismethod, WeakMethod, `lower`; a functools.partial before:
      AttributeError, exit 1);
    - jax.nn/random/scipy functions pickle, also into a process pool ("not the same object"
      before), and aliases stay one object (jax.nn.silu is jax.nn.swish: False before);
    - jax_explain_cache_misses names the script's line (it named capture/jaxhooks/jit.py);
    - `os.wait()` with no child of the script's raises ChildProcessError (it waited forever for
      jaxplace's writer process, then the script's child: store/writer_process.py)."""
    script = tmp_path / "transparent.py"
    script.write_text(TRANSPARENT)
    plain, jp = _run_both(tmp_path, script, "a")
    assert jp.returncode == plain.returncode == 0, jp.stderr
    assert jp.stdout == plain.stdout and f"['{script}', 'a']" in plain.stdout
    assert "no child to wait for" in plain.stdout
    where = [line for line in plain.stderr.splitlines() if "CACHE MISS at" in line]
    assert where and where == [line for line in jp.stderr.splitlines() if "CACHE MISS at" in line]
    assert all(f"{script}:" in line for line in where), where


def test_a_script_that_joins_every_thread_it_sees_ends(tmp_path):
    """`for t in threading.enumerate(): t.join()` at a program's end, a common pattern: it also
    finds jaxplace's writer thread, which runs until jaxplace stops it after the script, and
    waited for it forever; and the trace window's watchdog, which it waited for until the window's
    deadline (90 s here). Neither is a thread the script can see: `threading.active_count()` is 1
    and `while threading.active_count() > 1` ends, as under python (2, and never, before)."""
    script = tmp_path / "joinall.py"
    script.write_text(
        "import threading, jax.numpy as jnp\nx = jnp.ones(2)\n"
        "for _ in range(5): x = x * 2.0\n"
        "def join_all():\n"
        "    for t in threading.enumerate():\n"
        "        if t is not threading.current_thread(): t.join()\n"
        "join_all()\n"  # the trace window is open here (a steady state): its watchdog is a thread
        "out = []\n"
        "def w(i): out.append(float(jnp.ones(2).sum() * i))\n"
        "ts = [threading.Thread(target=w, args=(i,)) for i in range(3)]\n"
        "for t in ts: t.start()\n"
        "join_all()\n"
        "print(sorted(out), threading.active_count(), [t.name for t in threading.enumerate()])\n"
        "while threading.active_count() > 1: pass\n")
    plain = python(script)
    jp = jaxplace("run", "-q", "--trace-seconds", "90", "--trace-ops", "0", "--out", tmp_path / "r", script,
                  timeout=60)
    assert jp.returncode == plain.returncode == 0, jp.stderr
    assert jp.stdout == plain.stdout == "[0.0, 2.0, 4.0] 1 ['MainThread']\n"


def test_a_forked_child_that_exits_says_nothing_of_jaxplaces(tmp_path):
    """os.fork() then sys.exit(4) in the child: the child ends as under python (its exit code
    to the parent), with no jaxplace summary of its own (it printed a second one, "running
    (exit None)"); the parent's run is the run."""
    script = tmp_path / "fork.py"
    script.write_text("import os, sys\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n"
                      "    sys.exit(4)\n_, status = os.waitpid(pid, 0)\nprint('parent saw', os.waitstatus_to_exitcode(status))\n")
    plain = python(script)
    jp = jaxplace("run", "--no-trace", "--out", tmp_path / "r", script)
    assert jp.returncode == plain.returncode == 0, jp.stderr
    assert jp.stdout == plain.stdout == "child\nparent saw 4\n"
    assert jp.stderr.count("jaxplace: run saved to") == 1 and "running (exit None)" not in jp.stderr, jp.stderr



@pytest.mark.parametrize("policy", [[], ["--devices", "4", "--policy", "rr"]], ids=["recording", "policy"])
def test_jax_warnings_name_the_scripts_line(tmp_path, policy):
    """JAX's float64 warning (x64 off) from jnp.zeros / jnp.array: the same file:line and source
    line as under python, so a `filterwarnings("error", module="__main__")` matches as it does
    there and the traceback of the warning raised as an error is python's. They named jaxplace's
    wrapper (`dispatch.py: return (call or record_call)(...)`) and the filter did not match."""
    script = tmp_path / "warn.py"
    script.write_text(
        "import warnings, jax.numpy as jnp\na = jnp.zeros(3, dtype='float64')\n"
        "warnings.filterwarnings('error', module='__main__')\ntry:\n"
        "    jnp.zeros(3, dtype='float64'); print('no error raised')\nexcept UserWarning as e:\n"
        "    print('raised', str(e)[:40])\nb = jnp.array([1.0], dtype='float64')\n")
    env = child_env(XLA_FLAGS="--xla_force_host_platform_device_count=4")
    plain = python(script, env=env)
    jp = jaxplace("run", "--quiet", "--no-trace", *policy, "--out", tmp_path / "run", script, env=env)
    assert jp.returncode == plain.returncode == 1
    assert jp.stdout == plain.stdout == "raised Explicitly requested dtype float64 reque\n"
    assert _own_lines_out(jp.stderr) == plain.stderr
    assert f"{script}:2: UserWarning" in plain.stderr


def test_the_scripts_threads_get_pythons_default_names(tmp_path):
    """threading.Thread() without a name: Thread-N numbered as under python, while the trace
    window is open (its watchdog timer took numbers from the script's sequence)."""
    script = tmp_path / "names.py"
    script.write_text("import threading, jax.numpy as jnp\nx = jnp.ones(2)\nfor _ in range(5): x = x * 2.0\n"
                      "ts = [threading.Thread(target=lambda: None) for _ in range(3)]\n"
                      "for t in ts: t.start()\nfor t in ts: t.join()\nprint([t.name for t in ts])\n")
    plain = python(script)
    jp = jaxplace("run", "-q", "--trace-seconds", "60", "--trace-ops", "0", "--out", tmp_path / "r", script)
    assert jp.returncode == plain.returncode == 0, jp.stderr
    assert jp.stdout == plain.stdout


STDIN_SCRIPT = """import sys
print(sys.argv, repr(sys.path[0]), sorted(globals()), __file__, __loader__.__name__, __name__)
print(repr(sys.stdin.read()))
import jax.numpy as jnp
x = jnp.arange(4.0) * 2
print(float(x.sum()))
raise ValueError("from stdin")
"""


def test_a_script_read_from_stdin_runs_and_is_recorded_like_python_dash(tmp_path):
    """`jaxplace run - ARGS < script` as `python - ARGS`: argv[0] '-', sys.path[0] '', __file__
    '<stdin>', stdin at its end for the script, the traceback's `File "<stdin>"`; the run goes
    to jaxplace-runs/stdin-<time> and its sites are `<stdin>:LINE` (the float() read is line 6);
    a terminal on stdin is a usage error (python would start its prompt)."""
    plain = python("-", "a", "b", cwd=tmp_path, input=STDIN_SCRIPT)
    jp = jaxplace("run", "-q", "--no-trace", "-", "a", "b", cwd=tmp_path, input=STDIN_SCRIPT)
    assert plain.returncode == jp.returncode == 1, (plain.stderr, jp.stderr)
    assert jp.stdout == plain.stdout and "'-', 'a', 'b'] ''" in plain.stdout
    assert _own_lines_out(jp.stderr) == plain.stderr and 'File "<stdin>", line 7' in plain.stderr
    (run,) = (tmp_path / "jaxplace-runs").iterdir()
    assert run.name.startswith("stdin-")
    m = json.loads((run / "run.json").read_text())
    assert m["target"] == {"kind": "stdin", "name": "-"} and m["argv"] == ["-", "a", "b"]
    report = audit_json(run, "--min-bytes", "0")
    reads = [s for s in report["transfers"]["sites"] if s["kind"] == "d2h"]
    assert [(s["file"], s["line"], s["count"], s["bytes"]) for s in reads] == [("<stdin>", 6, 1, 4)], reads
    policy = tmp_path / "p.toml"
    sug = cli("suggest", run, "-o", policy)  # its re-run command names where the program goes, not `-`
    assert sug.returncode == 0 and f"--policy {policy} SCRIPT a b\n" in sug.stdout, sug.stdout


def test_launch_refuses_a_script_from_stdin(tmp_path):
    """`jaxplace launch -n 2 - < script`: each process would read its own stdin (/dev/null) and
    run an empty program, and the job said "2 processes exited 0"; a usage error instead."""
    r = jaxplace("launch", "-n", "2", "-", cwd=tmp_path, input="print('hi')\nraise SystemExit(3)\n")
    assert r.returncode == 2 and "not - (stdin)" in r.stderr and not (tmp_path / "jaxplace-runs").exists(), r.stderr


def test_a_terminal_on_stdin_is_a_usage_error(tmp_path):
    import pty

    leader, follower = pty.openpty()
    try:
        r = subprocess.run([sys.executable, "-m", "jaxplace_cli", "run", "-"], stdin=follower, capture_output=True,
                           text=True, env=child_env(), cwd=tmp_path, timeout=120)
    finally:
        os.close(leader)
        os.close(follower)
    assert r.returncode == 2 and "stdin, which is a terminal" in r.stderr and not (tmp_path / "jaxplace-runs").exists()
