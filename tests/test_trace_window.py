"""The native jax.profiler trace in a run directory: bounded window, jaxplace facts inside it."""
import json

from conftest import SCRIPTS, jaxplace


def _trace_events(run_dir):
    from jax.profiler import ProfileData

    (path,) = list((run_dir / "plugins" / "profile").glob("*/*.xplane.pb"))
    data = ProfileData.from_file(str(path))
    return [(ev.name, dict(ev.stats)) for plane in data.planes for line in plane.lines
            for ev in line.events]


def test_default_window_trace_holds_jaxplace_transfer_annotations(tmp_path):
    run_dir = tmp_path / "run"
    proc = jaxplace("run", "-q", "--devices", "2", "--out", run_dir, SCRIPTS / "ground_truth_a.py")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["trace"]["mode"] == "window" and manifest["trace"]["state"] == "closed"
    assert len(manifest["trace"]["files"]) == 1
    events = _trace_events(run_dir)
    ours = [stats for name, stats in events if name == "jaxplace.transfer.d2d"]
    # the window opens after the first dispatch (device_put to d0), so all 9 d2d moves are inside
    assert len(ours) == 9
    assert all(s["bytes"] == 1024 * 256 * 4 for s in ours)
    assert {s["site"].rsplit(":", 1)[1] for s in ours} == {"8", "10"}
    reads = [stats for name, stats in events if name == "jaxplace.transfer.d2h"]
    assert len(reads) == 1 and reads[0]["blocking"] == 1 and reads[0]["api"] == "np.asarray()"
    # and the trace itself is auditable as a foreign trace
    assert any(name.startswith("PjitFunction") or "device_put" in name for name, _ in events)


def test_threads_dispatching_together_open_one_window(tmp_path):
    """A pool of threads dispatching at once all found the window pending and each opened it:
    every start_trace after the first failed ("Profile has already been started") and the run
    said "trace not captured" (4 of 5 runs with 4 threads). The window opens once."""
    script = tmp_path / "pool.py"
    script.write_text("import jax.numpy as jnp\nfrom concurrent.futures import ThreadPoolExecutor\n"
                      "x = jnp.ones(4) * 2\nx = x + 1\n"
                      "def work(i):\n    y = x\n    for _ in range(300):\n        y = y * 1.0001\n"
                      "    return float(y.sum())\n"
                      "with ThreadPoolExecutor(8) as ex:\n    print(len(list(ex.map(work, range(16)))))\n")
    proc = jaxplace("run", "-q", "--out", tmp_path / "r", script)
    assert (proc.returncode, proc.stdout) == (0, "16\n"), proc.stderr
    trace = json.loads((tmp_path / "r" / "run.json").read_text())["trace"]
    assert (trace["state"], trace["note"], len(trace["files"])) == ("closed", "", 1), trace


def test_no_trace_writes_no_profile(tmp_path):
    run_dir = tmp_path / "run"
    proc = jaxplace("run", "-q", "--no-trace", "--devices", "2", "--out", run_dir, SCRIPTS / "ground_truth_a.py")
    assert proc.returncode == 0
    assert not (run_dir / "plugins").exists()
    assert json.loads((run_dir / "run.json").read_text())["trace"]["state"] == "off"


def test_script_starting_its_own_trace_is_not_broken(tmp_path):
    script = tmp_path / "own_trace.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "x = jnp.ones(8) + 1\n"
        f"with jax.profiler.trace({str(tmp_path / 'mine')!r}):\n"
        "    y = (x * 2).block_until_ready()\n"
        "print(float(y.sum()))\n")
    proc = jaxplace("run", "-q", "--out", tmp_path / "run", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "32.0\n"
    assert list((tmp_path / "mine" / "plugins" / "profile").glob("*/*.xplane.pb"))
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert "started its own trace" in manifest["trace"]["note"]


def test_window_closes_after_trace_ops_dispatches(tmp_path):
    """--trace-ops 50: the window opens at the first dispatch and closes once 50 more ops were
    dispatched inside it, long before its second is up; the rest of the run is still recorded."""
    script = tmp_path / "many.py"
    script.write_text("import jax.numpy as jnp\nx = jnp.ones(8)\nfor _ in range(300):\n    x = x * 1.0\n"
                      "print(float(x.sum()))\n")
    run_dir = tmp_path / "run"
    proc = jaxplace("run", "-q", "--trace-ops", "50", "--trace-seconds", "60", "--out", run_dir, script)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["trace"]["state"] == "closed" and manifest["trace"]["max_ops"] == 50
    assert manifest["trace"]["traced_ops"] == 50
    assert manifest["events"]["ops"] == 302  # ones, 300 multiplies, sum
    assert len(manifest["trace"]["files"]) == 1
