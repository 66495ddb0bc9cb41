"""``jaxplace launch`` watches the scripts, not only the processes (issue 25, item 5).

Two real 2-process launches (gloo CPU collectives, one step = one all-reduce of a global
array over both processes' devices):

* process 1 raises after step 2. Its process does not end — python's exit waits in JAX's
  distributed shutdown for its peer, and process 0 waits in step 3's all-reduce for it (the
  job ran until Ctrl-C before). launch must hear the script end, stop the job, exit 1, and
  name process 1 and its exception line in job.json, its summary and the merged audit;
* process 1 sleeps after step 2 (its script hangs): with ``--timeout`` launch names process
  1 hung — not process 0, which stopped too, waiting in the all-reduce — and exits 124.

Each launch takes ~10 s on the shared 2-core box; the bound asserted (60 s, the issue's) is
what fails when the job is not stopped at all.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import pytest
from conftest import REPO, audit_json, child_env

STEP_SCRIPT = """\
import sys, time
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize()
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("d",))
total = jax.jit(lambda x: x.sum(), out_shardings=NamedSharding(mesh, P()))
for step in range(1000):
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")),
                                               np.ones((2 * len(jax.local_devices()),), np.float32))
    print(step, float(total(x)), flush=True)
    if step == 2 and jax.process_index() == 1:
        if sys.argv[1] == "raise":
            raise ValueError("boom in process 1")
        time.sleep(1000)
    time.sleep(0.1)
"""


def _launch(tmp_path, mode, *options):
    script = tmp_path / "steps.py"
    script.write_text(STEP_SCRIPT)
    out = tmp_path / "job"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "jaxplace_cli", "launch", "-n", "2", "--grace", "5",
                           "--trace", "off", *options, "--out", str(out), str(script), mode],
                          env=child_env(), capture_output=True, text=True, timeout=170)
    return out, proc, time.monotonic() - t0


def test_a_process_that_raises_fails_the_job_with_its_exception(tmp_path):
    out, proc, took = _launch(tmp_path, "raise", "--devices-per-process", "2")
    assert took < 60, took
    assert proc.returncode == 1, proc.stderr[-3000:]
    # python's traceback of process 1, and launch's summary naming it with its exception line
    assert "[p1] ValueError: boom in process 1" in proc.stderr
    assert ("jaxplace: launch: process 1 failed first (exit 1: ValueError: boom in process 1); "
            "the others were stopped") in proc.stderr
    # each process has 2 CPU devices, as asked: no warning that --devices was overridden (the
    # job's 4 global devices are not the process's)
    assert "was overridden" not in proc.stderr
    job = json.loads((out / "job.json").read_text())
    assert job["first_failure"] == {"index": 1, "exit_code": 1, "error": "ValueError: boom in process 1"}
    assert (job["status"], job["exit_code"]) == ("failed", 1)
    ends = {e["index"]: e for e in job["processes"]}
    assert (ends[1]["exit_code"], ends[1]["stopped_by_launch"]) == (1, False)
    assert (ends[0]["exit_code"], ends[0]["stopped_by_launch"]) == (130, True)
    for i in range(2):
        m = json.loads((out / f"proc-{i}" / "run.json").read_text())
        assert len([d for d in m["devices"] if d["process"] == i]) == 2 and not m["warnings"]
    assert json.loads((out / "proc-1" / "run.json").read_text())["error"] == "ValueError: boom in process 1"
    r = audit_json(out)
    assert r["distributed"]["first_failure"] == 1
    died = [f for f in r["findings"] if f["rule"] == "process-died"]
    assert len(died) == 1 and died[0]["severity"] == "error"
    assert died[0]["message"].startswith(
        "process 1 died first: exit 1 (ValueError: boom in process 1); launch stopped the others "
        "(p0: exit 130 after launch stopped it)")


def test_a_process_that_hangs_is_named_after_the_timeout(tmp_path):
    out, proc, took = _launch(tmp_path, "hang", "--timeout", "4")
    assert took < 60, took
    assert proc.returncode == 124, proc.stderr[-3000:]
    assert "jaxplace: launch: process 1 failed first (hung: no event recorded for " in proc.stderr
    job = json.loads((out / "job.json").read_text())
    ff = job["first_failure"]
    assert (ff["index"], ff["exit_code"], ff["hung"]) == (1, 124, True)
    assert ff["error"].startswith("hung: no event recorded for ")
    ends = {e["index"]: e for e in job["processes"]}
    assert ends[1]["hung"] == ff["error"] and ends[0].get("hung") is None
    # process 1 was in python (time.sleep): the SIGINT ended it as python's Ctrl-C would
    m1 = json.loads((out / "proc-1" / "run.json").read_text())
    assert (m1["status"], m1["exit_code"]) == ("interrupted", 130)
    r = audit_json(out)
    assert r["distributed"]["first_failure"] == 1
    died = [f for f in r["findings"] if f["rule"] == "process-died"]
    assert len(died) == 1 and died[0]["message"].startswith("process 1 died first: hung: no event recorded for ")


IN_JAX_SCRIPT = """\
import _thread, sys, threading, time
sys.path.insert(0, sys.argv[1])
import conftest  # the simulated devices
import jax.numpy as jnp
from inprocess import recorded
from jaxplace_cli.capture import distributed, native
from jaxplace_cli.capture.jaxhooks import dispatch
from jaxplace_cli.capture.jaxhooks.state import CallSpec
from jaxplace_cli.model.events import OP_JIT

main = threading.main_thread()
assert threading.current_thread() is main
seen = []
gate = _thread.allocate_lock()
gate.acquire()

def watch():  # as launch's heartbeat reads the main thread, once it is inside the call
    deadline = time.monotonic() + 60
    while not native.module().main_depth() and time.monotonic() < deadline:
        time.sleep(0.01)
    seen.append(("blocked in a call", distributed._in_jax(sys._current_frames()[main.ident])))
    gate.release()

class Lazy:  # read by JAX inside the op: the script's own code runs inside the call
    def __jax_array__(self):
        seen.append(("called back", distributed._in_jax(sys._getframe())))
        return jnp.ones(3)

with recorded():
    # a recorded call that blocks in C (as a jit call blocks in a collective): no Python frame
    # between the script's line and the wait
    blocked = dispatch.c_jit_function(gate.acquire, CallSpec("jit(wait)", OP_JIT), dispatch.record_call, ((), ()))
    threading.Thread(target=watch).start()
    blocked()
    x = jnp.ones(3) + Lazy()
    seen.append(("between ops", distributed._in_jax(sys._getframe())))
print(seen)
"""


@pytest.mark.skipif(not all(importlib.util.find_spec(f"jaxplace_cli.{m}") for m in ("capture._native", "model._packed",
                                                                                 "capture._wrap")),
                    reason="the C extensions are not built here: the frame alone says it")
def test_the_heartbeat_tells_a_main_thread_blocked_in_a_recorded_call_from_the_scripts_own_code(tmp_path):
    """What launch's heartbeat says of the main thread (distributed._in_jax): blocked in a
    recorded call whose hooks are C, the innermost Python frame is the script's line, and it is
    in JAX (read from another thread, as the heartbeat reads it); the script's code called back
    from inside a call (``__jax_array__``), or between calls, is the script's. Without the
    thread state's depth the first was 'script' too, and launch named the wrong process of the
    hang test above hung."""
    script = tmp_path / "in_jax.py"
    script.write_text(IN_JAX_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(REPO / "tests")], env=child_env(JAXPLACE_CAPTURE="native"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == ("[('blocked in a call', True), ('called back', False), ('between ops', False)]"), \
        proc.stdout
