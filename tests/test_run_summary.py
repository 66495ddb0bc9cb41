"""jaxplace run's last lines are made in the writer process (cli/run_summary.py, issue 29): the
same lines the script's process makes, and the writer process's after-run calls behave."""
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import SAMPLES, alive, child_env, jaxplace

from jaxplace_cli.cli.run_summary import summary_lines_of
from jaxplace_cli.store.layout import read_manifest
from jaxplace_cli.store.writer_process import WriterProcess


@pytest.mark.parametrize("quiet", [False, True])
def test_the_writer_made_lines_are_the_in_process_ones(tmp_path, quiet, monkeypatch):
    """A run with an error finding (pingpong_eager.py: the demo): what `jaxplace run` printed
    at its end is what the in-process fallback makes from the same run directory, in the same
    working directory (file names are said below it)."""
    run = tmp_path / "run"
    r = jaxplace("run", "--devices", "2", *(["-q"] if quiet else []), "--out", str(run),
                 str(SAMPLES / "pingpong_eager.py"), cwd=SAMPLES)
    assert r.returncode == 0, r.stderr[-2000:]
    monkeypatch.chdir(SAMPLES)
    here = summary_lines_of(read_manifest(run), run, quiet, saved=True)
    assert any("pingpong" in line for line in here)  # the verdict is in them
    printed = r.stderr.splitlines()
    assert printed[-len(here):] == here
    assert quiet or "error pingpong_eager.py:25" in "\n".join(here)


CHDIR = """
import os, sys
import jax.numpy as jnp
x = jnp.arange(4.0)
for _ in range(3):
    x = jnp.asarray(x.tolist())  # a host round trip each step: a finding at this line
os.makedirs(sys.argv[1], exist_ok=True)
os.chdir(sys.argv[1])
"""


def test_file_names_are_said_below_the_script_s_last_directory(tmp_path, monkeypatch):
    """The script changed directory: the writer process says file names as the script's
    process would, from where the script ended (not where the writer was started)."""
    (tmp_path / "w").mkdir()
    script = tmp_path / "w" / "moves.py"
    script.write_text(CHDIR)
    run = tmp_path / "run"
    r = jaxplace("run", "--out", str(run), str(script), str(tmp_path / "elsewhere"), cwd=tmp_path / "w")
    assert r.returncode == 0, r.stderr[-2000:]
    monkeypatch.chdir(tmp_path / "elsewhere")
    here = summary_lines_of(read_manifest(run), run, False, saved=True)
    assert r.stderr.splitlines()[-len(here):] == here


SCRIPT = """
import sys
import jax.numpy as jnp
print(float((jnp.ones(4) * 2).sum()))
print(sorted(m for m in sys.modules if m.startswith("jaxplace_cli.analysis")))
"""


def test_the_script_process_imports_no_analysis(tmp_path):
    """The audit's modules (numpy's analysis, the rules) are the writer process's business:
    none is imported in the script's process, before, during or after the script (python's
    own import log, which the writer process, run with -I, does not write) — and the verdict
    is there, so the writer process made it."""
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    r = jaxplace("run", "--out", str(tmp_path / "run"), str(script), cwd=tmp_path,
                 env=child_env(PYTHONPROFILEIMPORTTIME="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["8.0", "[]"]
    assert "jaxplace_cli.cli.run_summary" in r.stderr  # the log is there (imported here, for PRELOAD)
    assert "jaxplace_cli.analysis" not in r.stderr
    assert "no findings" in r.stderr


HOLDER = "import sys, time; time.sleep(float(sys.argv[1]))"


def _holder(w: WriterProcess) -> subprocess.Popen:
    """A process holding the parent's end of the writer's socket, as a process the script
    forked would: the writer never sees its input end while it lives."""
    return subprocess.Popen([sys.executable, "-c", HOLDER, "120"], pass_fds=(w._sock.fileno(),))


@pytest.mark.parametrize("linger", [False, True])
def test_a_forked_holder_of_the_socket_does_not_keep_the_writer(tmp_path, linger):
    """close() (and end() after a lingering close) say it in a frame: the writer leaves at once,
    on its own (exit 0, not killed after a timeout), while the holder still runs."""
    w = _writer(tmp_path)
    holder = _holder(w)
    try:
        w.close(linger=linger)
        if linger:
            assert w.call("jaxplace_cli.model.sizes", "human_bytes", {"n": 1024}, timeout=30) == "1.0 KiB"
            w.end()
        assert w.ended and not w.killed and _gone_within(w.pid, 20) and holder.poll() is None
    finally:
        holder.kill()
        holder.wait()


def _writer(tmp_path) -> WriterProcess:
    (tmp_path / "run").mkdir()
    return WriterProcess(tmp_path / "run" / "events.sqlite")


def test_a_lingering_writer_answers_calls_then_goes(tmp_path):
    w = _writer(tmp_path)
    w.preload(["jaxplace_cli.model.sizes", "no.such.module"])  # a missing one is the call's business
    w.close(linger=True)
    assert w.lingering and w.error == "" and w.rows_written == 0
    assert w.call("jaxplace_cli.model.sizes", "human_bytes", {"n": 2048}, timeout=30) == "2.0 KiB"
    with pytest.raises(RuntimeError, match="not a jaxplace module"):
        w.call("os", "getcwd", {}, timeout=30)
    with pytest.raises(RuntimeError, match="ZeroDivisionError|TypeError"):
        w.call("jaxplace_cli.model.sizes", "human_bytes", {"n": "x"}, timeout=30)
    w.end()
    assert w.ended and not w.killed and not w.lingering and _gone_within(w.pid, 20)
    with pytest.raises(OSError):
        w.call("jaxplace_cli.model.sizes", "human_bytes", {"n": 1}, timeout=30)


def test_a_writer_that_dies_while_lingering_is_an_oserror(tmp_path):
    w = _writer(tmp_path)
    w.close(linger=True)
    os.kill(w.pid, signal.SIGKILL)
    with pytest.raises(OSError):
        w.call("jaxplace_cli.model.sizes", "human_bytes", {"n": 1}, timeout=30)
    assert w.ended and not w.lingering


def test_closing_without_linger_reaps_the_writer(tmp_path):
    w = _writer(tmp_path)
    w.close()
    assert w.ended and not w.killed and not w.lingering and w.sqlite in ("c", "module")
    assert _gone_within(w.pid, 20)


def test_a_killed_parent_ends_a_lingering_writer(tmp_path):
    """The parent dies (SIGKILL) after the run, before letting its writer go: the writer sees
    its input end and exits, leaving nothing running."""
    code = (f"import sys; sys.path.insert(0, {str(SAMPLES.parent)!r}); import os, pathlib; "
            "from jaxplace_cli.store.writer_process import WriterProcess; "
            f"w = WriterProcess(pathlib.Path({str(tmp_path / 'events.sqlite')!r})); w.close(linger=True); "
            "print(w.pid, flush=True); os.kill(os.getpid(), 9)")
    r = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    pid = int(r.stdout.split()[0])
    if not _gone_within(pid, 20):
        os.kill(pid, 9)
        pytest.fail("the lingering writer outlived its parent")


def _gone_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` ends within ``seconds`` (a bound on a wait, not a timing check)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_only_a_store_trusted_by_its_writer_skips_the_integrity_check(tmp_path):
    """store.reader.trusting: the writer process reads the store it just committed without
    SQLite's quick_check; the same damaged store is refused everywhere else."""
    from jaxplace_cli.store.reader import StoreError, StoreReader, trusting

    run = tmp_path / "run"
    r = jaxplace("run", "-q", "--devices", "2", "--out", str(run), str(SAMPLES / "pingpong_eager.py"), cwd=SAMPLES)
    assert r.returncode == 0, r.stderr[-2000:]
    store = run / "events.sqlite"
    data = bytearray(store.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    data[len(data) - 2 * page:len(data) - page] = b"\xa5" * page  # a table page near the end: garbage
    store.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="integrity check"):
        StoreReader(store)
    with trusting(store):
        StoreReader(store).close()  # opened: the check was skipped
    with pytest.raises(StoreError, match="integrity check"):
        StoreReader(store)  # trusted only inside the block


SIGTERM_WITH_FORK = r"""
import os, signal, sys, time
import jax.numpy as jnp
jnp.ones(3).block_until_ready()
pid = os.fork()
if pid == 0:  # holds the script's descriptors, the writer's socket among them (not the test's pipes)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(60)
    os._exit(0)
open(sys.argv[1], "w").write(str(pid))
os.kill(os.getpid(), signal.SIGTERM)
"""


def test_a_terminated_run_does_not_leave_its_writer_to_a_forked_process(tmp_path):
    """A fatal signal ends the run (saved, `terminated`); the writer process leaves after its
    report although a process the script forked still holds its socket (it lingered for a
    verdict nobody would ask for, until the fork ended)."""
    import json

    script = tmp_path / "term.py"
    script.write_text(SIGTERM_WITH_FORK)
    run, holder_file = tmp_path / "run", tmp_path / "holder.pid"
    r = jaxplace("run", "-q", "--out", str(run), str(script), str(holder_file), cwd=tmp_path)
    holder = int(holder_file.read_text())
    try:
        assert r.returncode == -15 or r.returncode == 143, (r.returncode, r.stderr[-2000:])
        manifest = json.loads((run / "run.json").read_text())
        assert manifest["status"] == "terminated"
        if not _gone_within(manifest["events"]["writer"]["pid"], 20):
            pytest.fail("the writer process outlived its run while the fork held its socket")
        os.kill(holder, 0)  # the holder still runs: it was not what ended the writer
    finally:
        try:
            os.kill(holder, 9)
        except ProcessLookupError:
            pass


SHARDED = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((2,), ("d",))
x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("d")))  # shard rows
y = jax.device_put(jnp.ones(4), NamedSharding(mesh, P()))  # one buffer on two devices
print(float(x.sum() + y.sum()))
"""

AFTER_PRELOAD = """
import importlib, sys
from jaxplace_cli.cli.run_summary import PRELOAD, run_summary
for name in PRELOAD:
    importlib.import_module(name)
before = set(sys.modules)
lines = run_summary(sys.argv[1], False)
print(sorted(set(sys.modules) - before))
print(len(lines))
"""


def test_the_preload_is_all_a_summary_imports(tmp_path):
    """What the writer process imports while the script runs (PRELOAD) is every module the
    verdict needs, so none is left for after the script (np.unique imported numpy.ma, 8-15 ms,
    on a run with memory spread over devices): the summary of a sharded run, made in a fresh
    ``python -I`` as the writer process is, imports nothing more."""
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    run = tmp_path / "run"
    r = jaxplace("run", "--devices", "2", "--no-trace", "--out", str(run), str(script), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    import sqlite3

    con = sqlite3.connect(run / "events.sqlite")
    try:  # the run has what the memory report's device split reads
        assert con.execute("SELECT COUNT(*) FROM shards").fetchone()[0] > 0
        assert con.execute("SELECT COUNT(*) FROM buffers WHERE device LIKE '%,%'").fetchone()[0] > 0
    finally:
        con.close()
    p = subprocess.run([sys.executable, "-I", "-c", AFTER_PRELOAD, str(run)], capture_output=True,
                       text=True, env=child_env(OPENBLAS_NUM_THREADS="1"), cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    new, n_lines = p.stdout.splitlines()
    assert new == "[]" and int(n_lines) >= 3, p.stdout


AT_EXIT = """
import atexit, sys
import jax.numpy as jnp
atexit.register(lambda: print("the script's atexit", file=sys.stderr))
print(float(jnp.ones(3).sum()))
"""


def test_the_summary_is_the_last_thing_printed(tmp_path):
    """The writer process makes the summary while the script's interpreter tears down, and the
    script's process writes it after that (store/writer_process.py print_at_exit): what the
    script prints at its exit (an atexit handler) comes before it, the exit code is python's,
    and the lines are those the script's process would make."""
    script = tmp_path / "s.py"
    script.write_text(AT_EXIT)
    run = tmp_path / "run"
    r = jaxplace("run", "--out", str(run), str(script), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "3.0\n", r.stderr[-2000:]
    here = summary_lines_of(read_manifest(run), run, False, saved=True)
    printed = r.stderr.splitlines()
    assert printed[-len(here) - 1:] == ["the script's atexit", *here]


PRINT_AT_EXIT = """
import os, subprocess, sys, pathlib
sys.path.insert(0, sys.argv[1])
from jaxplace_cli.capture._native import print_at_exit
from jaxplace_cli.store.writer_process import WriterProcess
w = WriterProcess(pathlib.Path(sys.argv[2]))
w.close(linger=True)
if sys.argv[3] == "dead":
    w.proc.kill(); w.proc.wait()
holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], pass_fds=(w._sock.fileno(),),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(w.pid, holder.pid, flush=True)
# plain() returns a str, not lines: the fallback is what is printed
assert w.print_at_exit("jaxplace_cli.model.safe", "plain", {"text": "x"}, 30, "fallback \u00fc", sys.stderr, print_at_exit)
assert not w.print_at_exit("jaxplace_cli.model.safe", "plain", {"text": "x"}, 30, "twice", sys.stderr, print_at_exit)
if os.fork() == 0:
    sys.exit(0)  # a fork child's exit (its teardown runs the hook too) writes nothing
os.wait()
print("last words", file=sys.stderr)
"""


@pytest.mark.parametrize("writer", ["alive", "dead"])
def test_print_at_exit_writes_the_fallback_once_after_everything(tmp_path, writer):
    """Lines that cannot be had (not lines, or the writer gone) end as the fallback line, once,
    after the process's own last output; the writer leaves once it answered although a process
    still holds its socket (a fork of the script would)."""
    pytest.importorskip("jaxplace_cli.capture._native")
    r = subprocess.run([sys.executable, "-c", PRINT_AT_EXIT, str(SAMPLES.parent), str(tmp_path / "e.sqlite"), writer],
                       env=child_env(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    pid, holder = map(int, r.stdout.split())
    try:
        assert r.stderr.endswith("last words\nfallback \u00fc\n".encode())
        assert r.stderr.count(b"fallback") == 1
        assert _gone_within(pid, 20), "the writer stayed for its socket's holder"
    finally:
        os.kill(holder, 9)


SIGNALLED = """
import os, signal, subprocess, sys, pathlib
sys.path.insert(0, sys.argv[1])
from jaxplace_cli.capture._native import print_at_exit
from jaxplace_cli.store.writer_process import WriterProcess
w = WriterProcess(pathlib.Path(sys.argv[2]))
w.close(linger=True)
os.kill(w.pid, signal.SIGSTOP)  # it will not answer: only the signal ends the wait
print(w.pid, flush=True)
assert w.print_at_exit("jaxplace_cli.model.safe", "plain", {"text": "x"}, 600, "fallback", sys.stderr, print_at_exit)
subprocess.Popen([sys.executable, "-c", SENDER, str(os.getpid()), sys.argv[3]],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("last words", file=sys.stderr)
"""
SENDER = """
import os, sys, time
while True:  # again and again until the process is gone: one lands in its last wait
    time.sleep(0.2)
    try:
        os.kill(int(sys.argv[1]), int(sys.argv[2]))
    except ProcessLookupError:
        break
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_wait_for_the_last_lines(tmp_path, signum):
    """Python's handlers cannot run after its teardown: the wait for the writer's lines has its
    own. Ctrl-C cuts it short (the fallback line, the script's exit code), SIGTERM too and then
    acts as it would have (death by SIGTERM). Without them the wait would last its 600 s."""
    pytest.importorskip("jaxplace_cli.capture._native")
    code = f"SENDER = {SENDER!r}\n" + SIGNALLED
    r = subprocess.run([sys.executable, "-c", code, str(SAMPLES.parent), str(tmp_path / "e.sqlite"), str(int(signum))],
                       env=child_env(), capture_output=True, timeout=60)
    pid = int(r.stdout.split()[0])
    try:
        assert r.returncode == (0 if signum == signal.SIGINT else -signal.SIGTERM), r.stderr.decode()[-2000:]
        assert r.stderr.endswith(b"last words\nfallback\n")
    finally:
        os.kill(pid, signal.SIGKILL)


CLOSES_ALL = """
import atexit, os, sys, tempfile
import jax.numpy as jnp
def close_all():  # what a daemonising script does: every descriptor past stderr, then a file
    os.closerange(3, 65536)
    f = tempfile.TemporaryFile()
    f.write(b"not the verdict\\0"); f.flush(); f.seek(0)
    print("closed", file=sys.stderr)
atexit.register(close_all)
print(float(jnp.ones(3).sum()))
"""


def test_a_script_that_closes_every_descriptor_at_exit_gets_the_fallback(tmp_path):
    """The writer's pipe closed by the script's own atexit handler (its number perhaps another
    file's by then): the last line says the verdict was not made — nothing else is read."""
    script = tmp_path / "s.py"
    script.write_text(CLOSES_ALL)
    run = tmp_path / "run"
    # well within the wait's own bound (60 s): the pipe is known to be gone, not waited for
    r = jaxplace("run", "--out", str(run), str(script), cwd=tmp_path, timeout=45)
    assert r.returncode == 0 and r.stdout == "3.0\n", r.stderr[-2000:]
    lines = r.stderr.splitlines()
    assert lines[-2] == "closed"
    assert lines[-1].startswith("jaxplace: the verdict was not made at the run's end; `jaxplace audit ")
    assert "not the verdict" not in r.stderr


def test_the_counts_line_from_the_verdict_is_the_aggregate_query_s(tmp_path):
    # the verdict's summary gives the counts line its numbers (no second scan): the same as the
    # query's, for counted, small and unknown-size transfers of every kind (counted by hand)
    from test_rules_unit import CFG, Rows

    from jaxplace_cli.analysis import audit_run
    from jaxplace_cli.analysis.summary import kind_counts, transfer_kind_counts
    from jaxplace_cli.cli.run_summary import SMALL
    from jaxplace_cli.store.reader import StoreReader

    r = Rows()
    seq = iter(range(1, 100))
    for kind, src, dst in (("h2d", "host", "cpu:0"), ("d2h", "cpu:0", "host"), ("d2d", "cpu:0", "cpu:1")):
        for nbytes in (4096, 2048, 1023, 1024, 4, -1, -1):
            r.xfer(next(seq), kind, src, dst, nbytes, site=0)
    run = r.open(tmp_path / "run")
    summary = audit_run(run, CFG).summary
    reader = StoreReader(tmp_path / "run" / "events.sqlite")
    try:
        queried = transfer_kind_counts(reader.transfer_totals(SMALL))
    finally:
        reader.close()
    assert summary.min_bytes == SMALL
    expected = (7, 4096 + 2048 + 1023 + 1024 + 4, 2, 2)  # 7 transfers, 2 under 1 KiB, 2 of unknown size
    assert kind_counts(summary) == queried == {"h2d": expected, "d2h": expected, "d2d": expected}
    run.store.close()
