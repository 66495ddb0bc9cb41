"""Shared test helpers: real subprocesses of `python -m jaxplace_cli`, real JAX, real files.

In-process tests get 4 simulated CPU devices: XLA_FLAGS must be set before JAX is imported,
which is why it happens here, at collection time.

Speed (issue 23): a command that only reads a run (audit, diff, suggest, export, report) runs
in this process through ``cli.main`` (``cli(...)``): the same code as the console script, none
of the ~1 s a new Python pays to import it. ``jaxplace(...)`` stays a real subprocess, for
recording and for the tests of the entry point itself. A sample script recorded with the same
options by several files is recorded once per session (``sample_run``).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import pytest

# XLA's CPU compiler at its least effort, here and in every child (``child_env``): after
# `import jax` (~0.6 s) compiles are a child's largest CPU cost, and both sides of every
# comparison (python and jaxplace, guard oracle and recording) get the same flags, so what a
# program computes, prints and moves is compared like for like. recompile_shapes.py under
# python: 2.2 -> 1.2 s of CPU (the whole suite: README, Development).
FAST_COMPILE = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


def with_fast_compile(flags: str) -> str:
    names = {f.split("=", 1)[0] for f in flags.split()}
    return " ".join([*flags.split(), *(f for f in FAST_COMPILE if f.split("=", 1)[0] not in names)])


os.environ["XLA_FLAGS"] = with_fast_compile(" ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    + ["--xla_force_host_platform_device_count=4"]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# A suite started from a non-interactive shell's background job inherits SIGINT and SIGQUIT
# ignored, and children inherit an ignored signal across exec: tests that send them would then
# wait for nothing (a SIGQUIT test spun for 8 minutes that way). A handler of our own is reset
# to the default in every child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "scripts"
SAMPLES = REPO / "sample_scripts"


# The transfer guard as an oracle: the program under plain python, JAX's C++ fast path withheld,
# so every dispatch takes the Python path, where the guard (JAX_TRANSFER_GUARD=log_explicit)
# logs each leg with its aval. Usage: [sys.executable, "-c", GUARD_ORACLE, SCRIPT, ARGS...].
GUARD_ORACLE = ("import runpy, sys; import jax._src.pjit as p; "
                "p._get_fastpath_data = lambda *a, **k: None; "
                "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # children choose their own device count (--devices, or XLA_FLAGS in ``extra``)
    env["XLA_FLAGS"] = with_fast_compile(extra.pop("XLA_FLAGS", ""))
    env.update(extra)
    return env


def jaxplace(*args, cwd=None, env=None, timeout=240, input=None) -> subprocess.CompletedProcess:
    """Run `python -m jaxplace_cli ARGS` in a subprocess and capture everything."""
    return subprocess.run([sys.executable, "-m", "jaxplace_cli", *map(str, args)],
                          cwd=cwd, env=env or child_env(), capture_output=True, text=True,
                          timeout=timeout, input=input)


def python(*args, cwd=None, env=None, timeout=240, input=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env or child_env(),
                          capture_output=True, text=True, timeout=timeout, input=input)


# Commands that import no JAX and run no user code here (suggest --verify re-runs the script
# in a child): what `cli` may run in this process.
IN_PROCESS = {"audit", "diff", "suggest", "export", "report"}


def cli(*args, cwd=None, env: dict | None = None) -> subprocess.CompletedProcess:
    """`jaxplace ARGS` through ``jaxplace_cli.cli.main.main`` in this process, as the console
    script would run it with stdout and stderr piped: exit code, stdout, stderr.

    Nothing leaks into the next test: the working directory and the environment are restored,
    and ``COLUMNS`` is pinned to what a pipe gets (100, or the caller's COLUMNS), since a
    terminal behind pytest ``-s`` would otherwise set the width of text reports. ``env`` holds
    variables to set (None: unset) for this call only."""
    argv = [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in args]
    assert argv[:1] and argv[0] in IN_PROCESS, f"cli() runs only reading commands, not {argv[:1]}"
    with _CLI_LOCK:  # sys.stdout, the environment and the cwd are the whole process's
        return _cli(argv, cwd, env)


_CLI_LOCK = threading.Lock()


def _cli(argv: list[str], cwd, env: dict | None) -> subprocess.CompletedProcess:
    from jaxplace_cli.cli.main import main

    changes = {"COLUMNS": os.environ.get("COLUMNS") or "100", **(env or {})}
    saved_env = {k: os.environ.get(k) for k in changes}
    saved_cwd = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        for k, v in changes.items():
            _setenv(k, v)
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit as exc:  # what the interpreter does with it
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
            except BaseException:  # noqa: BLE001 - an uncaught exception: traceback, exit 1
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        for k, v in saved_env.items():
            _setenv(k, v)
    return subprocess.CompletedProcess(["jaxplace", *argv], code, out.getvalue(), err.getvalue())


def _setenv(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value



def writer_pids(out) -> list[int]:
    """The pids of the writer processes recording into run directory ``out`` (Linux /proc):
    found by their command line, since the writer is the recording process's grandchild
    (store/writer_process.py), not its child."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"writer_child" in a for a in argv) and os.fsencode(Path(out) / "events.sqlite") in argv:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: a zombie (no init reaping an orphan in a container) has
    ended too."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

def store_rows(run_dir, sql: str, params=()) -> list[tuple]:
    """The rows of one query over a run's store (read-only, closed after)."""
    con = sqlite3.connect(f"file:{Path(run_dir) / 'events.sqlite'}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def audit_json(run_dir, *extra) -> dict:
    proc = cli("audit", run_dir, "--format", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def sites_by_line(report: dict, kind: str) -> dict:
    out: dict = {}
    for s in report["transfers"]["sites"]:
        if s["kind"] == kind:
            agg = out.setdefault(s["line"], {"count": 0, "bytes": 0, "sites": []})
            agg["count"] += s["count"]
            agg["bytes"] += s["bytes"]
            agg["sites"].append(s)
    return out


# The files that take longest (CPU seconds of the test and its children, measured per test),
# longest first: with `--dist loadfile --no-loadscope-reorder` (Makefile) each file is one work
# unit (its module fixtures built on one worker, not both), the workers start on these, and the
# short files fill the gaps at the end. (`--dist loadgroup` would allow smaller units, but xdist
# 3.8 cannot rename pytest 9's node ids.)
SLOW_FIRST = ["test_semantics", "test_faults_signals", "test_suggest_suite", "test_bench_smoke", "test_faults",
              "test_faults_loss", "test_suggest_suite_more", "test_dogfood", "test_runner", "test_library_corpus",
              "test_placement", "test_pytest_optin", "test_native", "test_fidelity_corpus", "test_distributed",
              "test_report_layout", "test_tracebacks", "test_fidelity_misc", "test_closed_streams", "test_memory_budget",
              "test_stress", "test_suggest_stages", "test_suggest_run"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Slow files first (a stable sort: the order inside a file is kept)."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(Path(item.nodeid.split("::")[0]).stem, len(rank)))


@pytest.fixture(scope="session")
def jax_devices():
    import jax

    devs = jax.devices()
    assert len(devs) == 4, "tests expect 4 simulated CPU devices (see conftest.py)"
    return devs


# -- one JAX compilation cache for the child processes of compile-agnostic files -------------

# XLA's CPU compiles are most of a child's CPU time here (the semantics driver: 18 s of CPU
# under python, 5.7 s with every program found in JAX's persistent cache). A file whose
# assertions cannot depend on whether a child compiled or loaded a program (no compile
# markers, recompile findings, trace-window warm-up or op times) marks itself
# ``pytestmark = pytest.mark.compile_cache``: its children (``child_env`` copies os.environ)
# share one cache for the session. A cache hit runs the same executable, so what a program
# computes, prints and moves is unchanged; what it no longer does is call XLA's compiler, which
# is why the shared sample recordings (``sample_run``) and every unmarked file never use it.
CACHE_VARS = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
              "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")


def pytest_configure(config):
    config.addinivalue_line("markers", "compile_cache: this file's child processes share one JAX "
                                       "compilation cache (tests/conftest.py says when a file may)")


@pytest.fixture(autouse=True)
def _compile_cache(request, tmp_path_factory, monkeypatch):
    if request.node.get_closest_marker("compile_cache") is None:
        for var in CACHE_VARS:  # e.g. set by the shell that started pytest
            monkeypatch.delenv(var, raising=False)
        return
    path = _shared_root(tmp_path_factory).parent / "jax-compile-cache"
    path.mkdir(exist_ok=True)
    for var, value in zip(CACHE_VARS, (str(path), "0", "0"), strict=True):
        monkeypatch.setenv(var, value)


# -- sample scripts recorded once per session ---------------------------------------------------

class Recording:
    """One finished ``jaxplace run``: its run directory (shared: read it, or ``copy_to`` a
    place of your own before changing it) and how the command ended."""

    def __init__(self, run: Path, result: dict):
        self.run = run
        self.returncode = result["returncode"]
        self.stdout = result["stdout"]
        self.stderr = result["stderr"]

    def copy_to(self, dst: Path) -> Path:
        shutil.copytree(self.run, dst, symlinks=True)
        return dst


def _shared_root(tmp_path_factory) -> Path:
    """A folder all xdist workers of this session share (their base temps are siblings)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "sample-runs"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory):
    """``sample_run(script, *options, devices=N, capture=None)`` -> Recording of
    ``jaxplace run -q --no-trace --devices N OPTIONS SAMPLES/script`` (run from the repo root).

    Keyed by (script, devices, options, capture path: ``capture``, else JAXPLACE_CAPTURE): a
    second request anywhere in the session, on either xdist worker, gets the first recording
    (a file lock makes the other worker wait for it instead of recording it again)."""
    root = _shared_root(tmp_path_factory)

    def get(script, *options, devices, capture: str | None = None) -> Recording:
        path = Path(script) if os.path.isabs(str(script)) else SAMPLES / script
        if path.suffix != ".py":
            path = path.with_suffix(".py")
        opts = ["--devices", str(devices), *map(str, options)]
        # "python" forces the Python hot path; anything else is the native one (capture/native.py)
        capture = "python" if (capture or os.environ.get("JAXPLACE_CAPTURE")) == "python" else None
        key = json.dumps([str(path), opts, capture])
        name = re.sub(r"[^\w.-]", "_", f"{path.stem}-{devices}")[:60]
        slot = root / f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:12]}"
        slot.mkdir(exist_ok=True)
        with open(slot / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = slot / "result.json"
            if not done.exists():
                shutil.rmtree(slot / "run", ignore_errors=True)  # a recording cut short
                env = child_env()
                env.pop("JAXPLACE_CAPTURE", None)
                for var in CACHE_VARS:  # shared by every file: recorded as a user would, compiling
                    env.pop(var, None)
                if capture:
                    env["JAXPLACE_CAPTURE"] = capture
                proc = jaxplace("run", "-q", "--no-trace", *opts, "--out", slot / "run", path,
                                cwd=REPO, env=env)
                tmp = slot / "result.tmp"
                tmp.write_text(json.dumps({"returncode": proc.returncode, "stdout": proc.stdout,
                                           "stderr": proc.stderr, "key": key}))
                tmp.replace(done)
            return Recording(slot / "run", json.loads(done.read_text()))

    return get


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium for the module's HTML tests (tests/browser.py); skipped without one."""
    from browser import Browser, find_chromium

    exe, why = find_chromium()
    if exe is None:
        pytest.skip(f"no headless Chromium: {why}")
    with Browser(exe) as b:
        yield b


def pytest_terminal_summary(terminalreporter):
    """The box's speed beside the suite's time: the CPU of one `import jax` in a child. The
    suite's CPU is mostly such children, so its time follows it (README, Development, has the
    measured pairs)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or terminalreporter.config.option.collectonly:
        return
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        subprocess.run([sys.executable, "-c", "import jax"], env=child_env(), capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    terminalreporter.write_line(f"box speed: `import jax` took {cpu:.2f} s of CPU in a child here "
                                f"(README, Development: the suite's times and this figure beside them)")
