"""Issue 13 items 4, 6, 9, 10: policies never break a correct program, "blocking" measured by
the device queue, --devices overridden by the script, user-facing API names. Real JAX, in
process (tests/inprocess.py) or in real `jaxplace run` subprocesses."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import jaxplace, python
from inprocess import recorded

pytestmark = [pytest.mark.usefixtures("jax_devices"), pytest.mark.compile_cache]  # children: conftest.py


def reads(r):
    return [(t.api, t.bytes, t.blocking) for t in r.of("d2h")]


# -- 6. blocking: did the host wait with the device's queue empty behind the value? -----------

def test_print_of_three_results_after_a_loop_waits_once():
    with recorded() as r:
        step = jax.jit(lambda w: (w + 1, (w * 2).sum(), (w * 3).sum()))
        w = jnp.zeros(4)
        for _ in range(10):
            w, a, b = step(w)
        print({"w": w, "a": a, "b": b})
    # the first read waits for the last step; the two others were computed by then
    assert reads(r) == [("repr()/print", 16, True), ("repr()/print", 4, False), ("repr()/print", 4, False)]


def test_reading_the_previous_step_does_not_stall():
    with recorded() as r:
        step = jax.jit(lambda w: (w * 0.5, w.sum()))
        w, prev, logged = jnp.ones(4), None, []
        for _ in range(5):
            w, loss = step(w)  # this step is queued before the previous loss is read
            if prev is not None:
                logged.append(float(prev))
            prev = loss
        final = float(loss)  # nothing queued behind it: the host waits and the device idles
    assert logged == [4.0, 2.0, 1.0, 0.5] and final == 0.25
    assert reads(r) == [("float()", 4, False)] * 4 + [("float()", 4, True)]


@pytest.mark.parametrize("work", ["add", "split"])
def test_eager_work_queued_behind_the_step_does_not_hide_the_stall(work):
    # behind this step's loss only eager work is queued (a running total, a key split): it is
    # done long before the next step is dispatched, so each float(loss) leaves the device idle;
    # a review found every such per-step read counted as not blocking (2026-12-07)
    with recorded() as r:
        step = jax.jit(lambda w: (w * 0.5, w.sum()))
        w, total, key, logged = jnp.ones(4), jnp.zeros(()), jax.random.key(0), []
        for _ in range(5):
            w, loss = step(w)
            if work == "add":
                total = total + loss
            else:
                key, _ = jax.random.split(key)
            logged.append(float(loss))
    assert logged == [4.0, 2.0, 1.0, 0.5, 0.25]
    assert reads(r) == [("float()", 4, True)] * 5


def test_block_until_ready_then_read_does_not_block():
    with recorded() as r:
        y = jax.jit(lambda v: v * 2)(jnp.ones(256))
        y.block_until_ready()
        total = float(y.sum())  # y.sum() is new work: this read waits for it
        host = np.asarray(y)  # y was waited for already
    assert total == 512.0 and host.shape == (256,)
    assert reads(r) == [("float()", 4, True), ("np.asarray()", 1024, False)]


# -- 10. the API a user called, not JAX's internals ------------------------------------------

def test_random_key_is_named_as_called():
    with recorded() as r:
        k = jax.random.key(0)
        legacy = jax.random.PRNGKey(1)
        jax.random.normal(k, (3,)).block_until_ready()
    assert [(t.api, t.bytes) for t in r.of("h2d")] == [("jax.random.key (Python scalar)", 4),
                                                       ("jax.random.PRNGKey (Python scalar)", 4)]
    assert [o.name for o in r.ops] == ["random.key", "random.PRNGKey", "random.normal"]
    assert legacy.shape == (2,)


def test_scipy_solver_is_one_op_named_as_called():
    a = jnp.eye(8) * 2.0
    b = jnp.ones(8)
    with recorded() as r:
        x = jax.scipy.linalg.solve_triangular(a, b, lower=True)
    assert float(x[0]) == 0.5
    assert [o.name for o in r.ops] == ["scipy.linalg.solve_triangular"]


def test_unary_operators_are_recorded():
    """-x, +x, abs(x) and ~x are jit functions in Array's class, not Python methods: they
    were dispatched unseen (issue 19). One op each, on the device of their data."""
    x = jnp.arange(4.0)
    i = jnp.arange(3)
    with recorded() as r:
        out = (-x, +x, abs(x), ~i)
    assert [o.name for o in r.ops] == ["negative", "positive", "abs", "invert"]
    assert {o.kind for o in r.ops} == {"method"} and {o.devices for o in r.ops} == {"cpu:0"}
    assert r.transfers == []
    assert np.asarray(out[0]).tolist() == [0.0, -1.0, -2.0, -3.0] and np.asarray(out[3]).tolist() == [-1, -2, -3]


def test_negation_of_placed_data_runs_where_the_policy_put_it(tmp_path):
    """Under pin:cpu:1 every op, -x included, runs on cpu:1: 0 d2d (unhooked, -x ran on
    cpu:0 and its result came back to cpu:1 in an unrecorded copy)."""
    script = tmp_path / "neg.py"
    script.write_text("import jax.numpy as jnp\nx = jnp.arange(4.0) * 2\ny = jnp.exp(-x)\n"
                      "print([d.id for d in y.devices()], float(y.sum()) > 0)\n")
    rec = jaxplace("run", "--devices", "2", "--no-trace", "--quiet", "--policy", "pin:cpu:1",
                   "--out", tmp_path / "run", script)
    assert rec.returncode == 0 and rec.stdout == "[1] True\n", rec.stderr
    import sqlite3

    with sqlite3.connect(tmp_path / "run" / "events.sqlite") as db:
        ops = db.execute("SELECT name, devices FROM ops ORDER BY seq").fetchall()
        kinds = dict(db.execute("SELECT kind, COUNT(*) FROM transfers GROUP BY kind").fetchall())
    assert ops == [("arange", "cpu:1"), ("multiply", "cpu:1"), ("negative", "cpu:1"), ("exp", "cpu:1"),
                   ("sum", "cpu:1")]
    assert "d2d" not in kinds and kinds.get("d2h") == 1  # float() reads 4 bytes


# -- 4. a policy never makes a correct program fail ------------------------------------------

SOLVE = '''
import jax, jax.numpy as jnp, numpy as np
import jax.scipy.linalg as jsl

d0 = jax.devices()[0]
a = jax.device_put(np.tril(np.ones((8, 8), np.float32)) + 8 * np.eye(8, dtype=np.float32), d0)
b = jax.device_put(np.ones((8, 3), np.float32), d0)
b2, c = b * 2, a + 1        # committed inputs: rr-strict runs these elsewhere
x = jsl.solve_triangular(c, b2, lower=True)
print(np.round(np.asarray(x).sum(), 4), jsl.cho_solve(jsl.cho_factor(c @ c.T), b2).shape)
lib_jit = getattr(jax.jit, "__jaxplace_original__", jax.jit)  # as a library's own jitted code
print(float(lib_jit(lambda p, q: (p @ q).sum())(c, b2)))       # jaxplace neither sees nor places it
'''


@pytest.mark.parametrize("policy", ["rr-strict", "rr"])
def test_policies_keep_scipy_solvers_working(tmp_path, policy):
    script = tmp_path / "solve.py"
    script.write_text(SOLVE)
    env_devices = "4"
    plain = python(script, env=_env(env_devices))
    assert plain.returncode == 0, plain.stderr
    rec = jaxplace("run", "--devices", env_devices, "--no-trace", "--quiet", "--policy", policy,
                   "--out", tmp_path / "run", script)
    assert (rec.returncode, rec.stdout) == (0, plain.stdout), rec.stderr


def _env(devices):
    from conftest import child_env

    return child_env(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")


def test_a_program_that_fails_under_python_fails_the_same_under_a_policy(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import jax, jax.numpy as jnp\nd = jax.devices()\n"
                      "a = jax.device_put(jnp.ones(3), d[0])\nb = jax.device_put(jnp.ones(3), d[1])\n"
                      "print('before')\nprint(a + b)\n")
    plain = python(script, env=_env(2))
    rec = jaxplace("run", "--devices", "2", "--no-trace", "--quiet", "--policy", "rr-strict",
                   "--out", tmp_path / "run", script)
    assert plain.returncode == rec.returncode == 1
    assert rec.stdout == plain.stdout == "before\n"
    assert "Received incompatible devices" in rec.stderr and rec.stderr == plain.stderr
    from conftest import audit_json

    (f,) = [f for f in audit_json(tmp_path / "run")["findings"] if f["rule"] == "incompatible-devices"]
    assert f["line"] == 6


# -- 9. --devices N overridden by the script --------------------------------------------------

def test_devices_overridden_by_the_script_is_said(tmp_path):
    script = tmp_path / "eight.py"
    script.write_text("import jax\njax.config.update('jax_num_cpu_devices', 8)\nprint(len(jax.devices()))\n")
    rec = jaxplace("run", "--devices", "4", "--no-trace", "--out", tmp_path / "run", script)
    assert rec.returncode == 0 and rec.stdout == "8\n"
    note = ("--devices 4 was overridden: the script set jax_num_cpu_devices=8, so the run used 8 "
            "CPU devices")
    assert f"jaxplace: warning: {note}" in rec.stderr.splitlines()
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["devices_override"] == {"requested": 4, "used": 8, "note": note}
    held = jaxplace("run", "--devices", "2", "--no-trace", "--out", tmp_path / "run2", _two(tmp_path))
    assert held.returncode == 0 and "warning" not in held.stderr
    assert json.loads((tmp_path / "run2" / "run.json").read_text()).get("devices_override") is None


def _two(tmp_path):
    p = tmp_path / "two.py"
    p.write_text("import jax\nprint(len(jax.devices()))\n")
    return p


def test_uploads_outside_every_op_are_named_as_called():
    """--record transfers leaves jax.numpy unwrapped: uploads JAX makes through its Python
    placement path (jnp.array of host data) are still seen, below it, named as called. (A
    Python scalar argument of a cached eager computation is uploaded by JAX's C++ fast path:
    unseen in this mode, as documented for --record transfers.)"""
    with recorded(record="transfers") as r:
        jnp.array([1.0, 2.0])
        jnp.asarray(np.arange(3))
    h2d = [(t.api, t.bytes) for t in r.of("h2d")]
    # jnp.array of a list is seen here only while its conversion is not yet cached in the
    # process: after any earlier jnp.array of a list (test_fidelity_legs' "array" case, on the
    # same xdist worker) JAX uploads it on its C++ fast path, which this mode does not see
    assert h2d in ([("jnp.array", 8), ("jnp.asarray", 12)], [("jnp.asarray", 12)]), h2d


def test_a_second_function_name_stays_whole_for_policies():
    """Rules match jit functions by recorded name; its definition's dot is not a module path."""
    from jaxplace_cli.placement.opinfo import canonical

    assert canonical("jit(f) [model.py:12]") == "jit(f) [model.py:12]"
    assert canonical("jnp.matmul") == "dot_general" and canonical("jit(step)") == "jit(step)"


def test_a_compile_marker_carries_an_argument_signature_for_a_jit_call_only():
    """The recompile rule reads the signature of jit calls only; for any other op in flight
    (an eager jnp op, a method) none is built: it repr()'d each argument that is not an array,
    and a repr may read device values (a device-to-host copy of jaxplace's making)."""
    with recorded() as r:
        jnp.sin(jnp.ones(19))  # a shape no other test uses: sin compiles under its op
        f = jax.jit(lambda a, n: a * n, static_argnums=1)
        f(jnp.ones(19), 3)
    by_op = {i.get("op"): i for i in (json.loads(m.value) for m in r.markers if m.kind == "compile")}
    assert "signature" not in by_op["sin"], by_op
    (jit_op,) = [name for name in by_op if name and name.startswith("jit(")]
    assert by_op[jit_op]["signature"] == ["float32[19] @cpu:0", "int 3"]
