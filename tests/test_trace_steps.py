"""The trace window on the steady state (issue 26 item 8): with StepTraceAnnotation it covers
whole steps after the first two, and run.json says which (``trace.steps``); without marked
steps it lands after the set-up's compiles. Asserted on run.json and the .xplane.pb's events,
never on timings (``--trace-seconds 60`` keeps the clock out of it)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import child_env, jaxplace

MARKED = """\
import jax, jax.numpy as jnp

a = jnp.ones(8)
a = a * 2
a = a * 2  # compiles nothing: a window without steps would open here, in the set-up

@jax.jit
def fwd(x):
    return x * 0.5

@jax.jit
def upd(x):
    return x + 1.0

for i in range(50, 60):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        a = upd(fwd(a))
print(float(a.sum()))
"""

UNMARKED = """\
import jax, jax.numpy as jnp

a = jnp.ones(8)
for _ in range(5):
    a = a * 2  # the first compiles; the second opens the window, the fourth fills it (3 ops)

@jax.jit
def step(x):
    return x * 0.5 + 1.0

for _ in range(100):
    a = step(a)  # the first call compiles after the window closed; placed again after the third
print(float(a.sum()))
"""


def _record(tmp_path, name: str, source: str):
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    out = tmp_path / f"{name}.run"
    proc = jaxplace("run", "-q", "--devices", 1, "--trace-ops", 3, "--trace-seconds", 60, "--out", out, script)
    assert proc.returncode == 0, proc.stderr
    trace = json.loads((out / "run.json").read_text())["trace"]
    (path,) = [out / f for f in trace["files"]]  # one session: a discarded window leaves no files
    assert [p.name for p in (out / "plugins" / "profile").iterdir()] == [path.parent.name]
    return trace, path


def _events(path) -> tuple[Counter, list]:
    from jax.profiler import ProfileData

    names, steps = Counter(), []
    for plane in ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            for ev in line.events:
                names[ev.name] += 1
                if ev.name == "train":
                    steps.append(dict(ev.stats).get("step_num"))
    return names, steps


@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    return _record(tmp_path_factory.mktemp("steps"), "marked", MARKED)


def test_marked_steps_window_covers_whole_steps_after_the_first_two(marked):
    trace, path = marked
    # opened as step 52 (the third) began; 2 dispatches per step: the limit (3) was reached
    # at step 53's first, so the window closed as step 53 ended: 4 dispatches, steps 52-53
    assert (trace["state"], trace["cut"], trace["traced_ops"], trace["steps"]) == ("closed", "ops", 4, [52, 53])
    names, steps = _events(path)
    assert sorted(steps) == [52, 53]  # XProf sees both steps whole
    assert names["PjitFunction(fwd)"] and names["PjitFunction(upd)"]


def test_unmarked_window_is_placed_again_after_a_short_set_up(tmp_path):
    trace, path = _record(tmp_path, "unmarked", UNMARKED)
    # the set-up's window (multiplies 3-5) was discarded when step compiled; placed again after
    # step's third call (two calls without a compile after its first): calls 4-6 traced, no marked step
    assert (trace["state"], trace["cut"], trace["traced_ops"], trace["steps"]) == ("closed", "ops", 3, None)
    names, _ = _events(path)
    assert names["PjitFunction(step)"]
    assert not any("multiply" in n for n in names), [n for n in names if "mul" in n]


def test_view_opens_on_the_trace_viewer_quietly(marked):
    """`jaxplace view`: the URL is XProf's trace viewer on the run's session; XProf's own log
    lines (one per request, its converters' C++ logs) go to a temporary file, not the terminal
    and not the run directory (input: a symlink planted there would be followed)."""
    from test_view import _get

    _, path = marked
    run, session = path.parents[3], path.parent.name
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "view", str(run), "--port", "0"],
                            env=child_env(), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first, second = proc.stderr.readline(), proc.stderr.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/)(\S*)", first)
        assert m, first
        root = m.group(1)
        assert m.group(2) == f"data/plugin/profile/trace_viewer?run={session}&tag=trace_viewer", first
        status, _ = _get(m.group(0))
        assert status == 200
        status, body = _get(root + "data/plugin/profile/runs")
        assert status == 200 and session in json.loads(body)
        # the offline line names XProf's log, which has the requests while it serves
        assert second.startswith("jaxplace: offline, the trace viewer works"), second
        log = Path(second.rsplit(" go to ", 1)[1].split()[0])
        for _ in range(100):  # XProf logs a request after answering it: wait for the line, ~10 s at most
            if "/data/plugin/profile/runs" in log.read_text():
                break
            time.sleep(0.1)
        assert "/data/plugin/profile/runs" in log.read_text()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # after those two lines: the stop, nothing of XProf's; a clean stop removes the log
    assert rest.splitlines() == ["jaxplace: XProf stopped"], rest
    assert not log.exists() and not (run / "xprof.log").exists()
