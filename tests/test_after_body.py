"""After the script's body: python first says how it ended, then waits for the script's
non-daemon threads (and the thread-exit hooks of ``concurrent.futures``), then runs the atexit
handlers, and on Ctrl-C dies of SIGINT only after all that. jaxplace closed its recording before
the threads' wait (their JAX work was lost) and, on Ctrl-C, killed itself before any of it (a
thread's output and an atexit handler saving a checkpoint never ran). Each case against python."""
import json
import signal
import subprocess
import sys
import time

from conftest import audit_json, child_env, jaxplace, python

LATE = """import threading, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import jax
def late():
    time.sleep(0.3)
    x = jax.device_put(np.ones(1000, np.float32))
    print("thread", float(x.sum()))
def queued(i):
    time.sleep(0.1)
    return float(jax.device_put(np.full(10, i, np.float32)).sum())
threading.Thread(target=late).start()
pool = ThreadPoolExecutor(1)
jobs = [pool.submit(queued, i) for i in range(3)]
print("body done")
"""


def test_the_scripts_threads_after_its_body_are_recorded(tmp_path):
    """A thread still running and an executor's queued work when the body ends: python waits
    for both; their transfers are in the run, counted by hand: h2d 1 x 4,000 B at line 7 and
    3 x 40 B at line 11, d2h 1 x 4 B at line 8 and 3 x 4 B at line 11."""
    script = tmp_path / "late.py"
    script.write_text(LATE)
    plain = python(script)
    jp = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", script)
    assert plain.returncode == jp.returncode == 0, jp.stderr
    assert jp.stdout == plain.stdout == "body done\nthread 1000.0\n"
    sites = {(s["kind"], s["line"]): (s["count"], s["bytes"])
             for s in audit_json(tmp_path / "r", "--min-bytes", "0")["transfers"]["sites"]}
    assert sites == {("h2d", 7): (1, 4000), ("h2d", 11): (3, 120), ("d2h", 8): (1, 4), ("d2h", 11): (3, 12)}, sites


def _interrupt(cmd, cwd, marker: str, wait: float = 0.0) -> tuple[int, str, str]:
    """Start ``cmd``, SIGINT it ``wait`` seconds after its stdout said ``marker``: (exit code,
    stdout, stderr)."""
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    seen = proc.stdout.readline()
    assert seen == marker + "\n", (seen, proc.stderr.read() if proc.poll() is not None else "")
    time.sleep(wait)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, seen + out, err


def _ours_out(text: str) -> str:
    return "".join(line for line in text.splitlines(True) if not line.startswith("jaxplace:"))


CTRL_C_IN_BODY = """import atexit, sys, threading, time
atexit.register(lambda: print("atexit ran", flush=True))
def work():
    time.sleep(0.5)
    print("thread done", flush=True)
threading.Thread(target=work).start()
print("body", flush=True)
time.sleep(30)
"""

CTRL_C_WHILE_WAITING = """import threading, time
from concurrent.futures import ThreadPoolExecutor
def work():
    time.sleep(30)
    print("thread done", flush=True)
threading.Thread(target=work).start()
pool = ThreadPoolExecutor(2)
for _ in range(2):
    pool.submit(work)
print("body done", flush=True)
"""


def test_ctrl_c_waits_for_the_threads_and_runs_atexit_before_dying_like_python(tmp_path):
    script = tmp_path / "body.py"
    script.write_text(CTRL_C_IN_BODY)
    plain = _interrupt([sys.executable, str(script)], tmp_path, "body")
    jp = _interrupt([sys.executable, "-m", "jaxplace_cli", "run", "-q", "--no-trace", "--out", str(tmp_path / "r"),
                     str(script)], tmp_path, "body")
    assert plain[0] == jp[0] == -signal.SIGINT
    assert jp[1] == plain[1] == "body\nthread done\natexit ran\n"
    assert _ours_out(jp[2]) == plain[2] and plain[2].endswith("KeyboardInterrupt\n")
    m = json.loads((tmp_path / "r" / "run.json").read_text())
    assert (m["status"], m["exit_code"]) == ("interrupted", 130)


def test_ctrl_c_while_python_waits_for_a_thread_is_reported_as_python_does(tmp_path):
    """python says "Exception ignored in: <module 'threading' ...>", leaves the threads (a plain
    one and an executor's two busy workers) and exits with the body's code; the run is saved
    with that code. An interrupted wait is not made again (python's is once: jaxplace's second
    call, and python's own at exit, joined the executor's workers after the Ctrl-C)."""
    script = tmp_path / "wait.py"
    script.write_text(CTRL_C_WHILE_WAITING)
    # 1 s after the body's last line, python is waiting for the thread (30 s)
    plain = _interrupt([sys.executable, str(script)], tmp_path, "body done", wait=1.0)
    jp = _interrupt([sys.executable, "-m", "jaxplace_cli", "run", "-q", "--no-trace", "--out", str(tmp_path / "r"),
                     str(script)], tmp_path, "body done", wait=1.0)
    assert plain[0] == jp[0] == 0
    assert jp[1] == plain[1] == "body done\n"
    assert _ours_out(jp[2]) == plain[2] and plain[2].startswith("Exception ignored in: <module 'threading'")
    m = json.loads((tmp_path / "r" / "run.json").read_text())
    assert (m["status"], m["exit_code"]) == ("complete", 0)
