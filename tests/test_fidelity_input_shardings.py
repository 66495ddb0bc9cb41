"""Where a jit call's inputs went, from its compiled program's input shardings
(capture/jaxhooks/inputs.py), against JAX's transfer guard and by hand (the script's docstring):

- a jitted function that returns no array (a ``jax.new_ref`` update, a function returning None)
  still uploads its host arguments and moves an uncommitted array to where it runs; no result
  says where that is, the input shardings do (``resultless``). Before, such a call recorded
  nothing: a ref-update loop's NumPy operand, 3 legs in 3 calls under the guard, was 0;
- a sharded call's NumPy argument after one the program drops, or after a None: the dropped
  one held no place in the list of shardings, so the next was read with its neighbour's (2 x
  128 B where the devices received 2 x 64 B), and a None was one entry too many (a (4, 1)
  column counted whole on each device, 2 x 16 B for 2 x 8 B)."""
import subprocess
import sys

import pytest
from conftest import GUARD_ORACLE, REPO, SCRIPTS, child_env, jaxplace, store_rows

sys.path.insert(0, str(REPO / "bench"))
try:
    import accel_check  # the guard's lines parsed once for every test and tool
finally:
    sys.path.remove(str(REPO / "bench"))

SCRIPT = SCRIPTS / "input_shardings.py"
LINES = {m: i for i, t in enumerate(SCRIPT.read_text().splitlines(), 1)
         for m in ("L-loop", "L-moved", "L-none", "L-sharded") if f"# {m}" in t}
pytestmark = pytest.mark.compile_cache  # what is asserted is what moved, not what compiled


def test_a_call_that_returns_no_array_records_the_guards_legs_and_is_an_op(tmp_path):
    env = child_env(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_TRANSFER_GUARD="log_explicit")
    oracle = subprocess.run([sys.executable, "-c", GUARD_ORACLE, str(SCRIPT)], capture_output=True, text=True,
                            env=env, timeout=240, cwd=tmp_path)
    assert oracle.returncode == 0, oracle.stderr[-2000:]
    out = tmp_path / "run"
    proc = jaxplace("run", "-q", "--no-trace", "--devices", "2", "--out", out, SCRIPT, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == oracle.stdout, proc.stderr[-2000:]
    rows = store_rows(out, "SELECT t.kind, t.dst, t.bytes, s.line FROM transfers t JOIN sites s ON s.id = t.site"
                           " WHERE t.api LIKE 'jit(%' ORDER BY t.seq")
    # by hand (the script's docstring), and the same multiset as the guard's legs of jit calls
    loop, moved, sharded = LINES["L-loop"], LINES["L-moved"], LINES["L-sharded"]
    assert rows == [("h2d", "cpu:0", 16, loop), ("h2d", "cpu:0", 4, loop)] * 2 + [
        ("d2d", "cpu:1", 16, moved), ("h2d", "cpu:1", 4, moved),
        ("h2d", "cpu:0", 64, sharded), ("h2d", "cpu:1", 64, sharded),
        ("h2d", "cpu:0", 32, sharded), ("h2d", "cpu:1", 32, sharded),
        ("h2d", "cpu:0", 8, sharded), ("h2d", "cpu:1", 8, sharded)]
    # every leg of the run, these and those of other calls (jnp fills, device_put), is one the
    # guard logged: the same count and bytes per kind
    legs = accel_check.guard_legs(oracle.stderr.splitlines())
    totals = dict(((k, (n, b)) for k, n, b in store_rows(
        out, "SELECT kind, COUNT(*), SUM(bytes) FROM transfers WHERE kind != 'd2h' GROUP BY kind")))
    assert totals == {k: tuple(legs[k][:2]) for k in ("h2d", "d2d")} and legs["h2d"][2] == legs["d2d"][2] == 0
    # each call that returned no array is an op on the device it ran on (it was none)
    ops = store_rows(out, "SELECT o.name, o.devices, s.line FROM ops o JOIN sites s ON s.id = o.site"
                          " WHERE o.name = 'jit(update)' ORDER BY o.seq")
    assert ops == [("jit(update)", "cpu:0", loop)] * 2 + [("jit(update)", "cpu:1", moved)], ops


def test_under_a_policy_the_legs_go_where_the_policy_ran_the_call(tmp_path):
    out = tmp_path / "run"
    proc = jaxplace("run", "-q", "--no-trace", "--devices", "2", "--policy", "pin:cpu:1", "--out", out, SCRIPT,
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = store_rows(out, "SELECT t.kind, t.dst, t.bytes, s.line FROM transfers t JOIN sites s ON s.id = t.site"
                           " WHERE t.api LIKE 'jit(%' ORDER BY t.seq")
    # pinned: the refs and the arange are made on cpu:1, so the call runs there and moves
    # nothing; the sharded call is JAX's (no policy places data sharded over several devices)
    loop, moved, sharded = LINES["L-loop"], LINES["L-moved"], LINES["L-sharded"]
    assert rows == [("h2d", "cpu:1", 16, loop), ("h2d", "cpu:1", 4, loop)] * 2 + [("h2d", "cpu:1", 4, moved)] + [
        ("h2d", f"cpu:{i}", n, sharded) for n in (64, 32, 8) for i in (0, 1)], rows
