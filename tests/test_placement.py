"""Placement policies (issue 3): every form from the CLI and from device_placement(), exact
placement assertions on 4 simulated devices, errors, and results equal to the default run."""
import sqlite3
import threading

import numpy as np
import pytest
from conftest import SAMPLES, audit_json, jaxplace

# XLA compiles are most of these children's CPU; nothing here depends on them (conftest.py)
pytestmark = pytest.mark.compile_cache

POLICIES = SAMPLES / "policies"


def ops_of(run_dir):
    with sqlite3.connect(run_dir / "events.sqlite") as c:
        return c.execute("SELECT name, devices, placed, kind FROM ops WHERE error = '' ORDER BY seq").fetchall()


def markers_of(run_dir, kind):
    with sqlite3.connect(run_dir / "events.sqlite") as c:
        return [v for (v,) in c.execute("SELECT value FROM markers WHERE kind = ? ORDER BY seq", (kind,))]


def run_policy(tmp_path, script, *opts, name="run"):
    out = tmp_path / name
    proc = jaxplace("run", "-q", "--no-trace", "--devices", "4", "--out", out, *opts, script)
    return proc, out


# -- ground truth: 8 independent trials ------------------------------------------------------

@pytest.fixture(scope="module")
def trial_runs(sample_run):
    runs = {}
    for policy in ("default", "rr", "rr-strict", f"{POLICIES}/placers.py:RoundRobinPlacer"):
        rec = sample_run("placement_trials", "--policy", policy, devices=4)  # once per session
        assert rec.returncode == 0, rec.stderr
        runs[policy.rsplit(":", 1)[-1]] = (rec.stdout, rec.run)
    return runs


def test_default_runs_everything_on_device_0(trial_runs):
    _, out = trial_runs["default"]
    ops = ops_of(out)
    # per trial: asarray + 4 update calls; then 8 sums at the end
    assert len(ops) == 8 * 5 + 8
    assert {d for _, d, _, _ in ops} == {"cpu:0"}


def test_rr_gives_each_device_two_whole_trials_without_copies(trial_runs):
    stdout, out = trial_runs["rr"]
    assert stdout == trial_runs["default"][0]  # same results
    ops = ops_of(out)
    trial_ops = [o for o in ops if o[0] in ("asarray", "jit(<lambda>)")]
    # trial t = ops 5t..5t+4, all on device t mod 4
    for t in range(8):
        assert {d for _, d, _, _ in trial_ops[5 * t:5 * t + 5]} == {f"cpu:{t % 4}"}
    r = audit_json(out)
    for dev in ("cpu:0", "cpu:1", "cpu:2", "cpu:3"):
        assert r["ops"]["by_device"][dev]["count"] == 2 * 5 + 2  # 2 trials x 5 ops + their 2 sums
    assert r["transfers"]["totals"]["d2d"] == {"count": 0, "bytes": 0}


def test_rr_strict_pays_in_d2d_copies(trial_runs):
    stdout, out = trial_runs["rr-strict"]
    assert stdout == trial_runs["default"][0]
    r = audit_json(out)
    # op k goes to device k mod 4. Trial t is ops 5t..5t+4: each of its 4 updates runs one
    # device further than its input, so its 64x64 float32 input (16 KiB) moves: 8 x 4 moves.
    # The sum of trial t is op 40+t -> device t mod 4, and trial t's result lives on device
    # (5t+4) mod 4 = t mod 4: no move.
    assert r["transfers"]["totals"]["d2d"] == {"count": 32, "bytes": 32 * 64 * 64 * 4}


def test_stateful_callable_class_is_round_robin(trial_runs):
    stdout, out = trial_runs["RoundRobinPlacer"]
    assert stdout == trial_runs["default"][0]
    ops = ops_of(out)
    assert [d for _, d, _, _ in ops] == [f"cpu:{i % 4}" for i in range(len(ops))]
    assert all(p.startswith("callable ") for _, _, p, _ in ops)


# -- scenarios (a), (c), (d), (e) --------------------------------------------------------------

def test_a_matmul_transpose_rest(sample_run):
    proc = sample_run("placement_families", "--policy", POLICIES / "matmul_transpose_rest.toml", devices=4)
    out = proc.run
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "checksum 660.8438\n"
    where = {name: dev for name, dev, _, _ in ops_of(out)}
    assert where == {"asarray": "cpu:2", "matmul": "cpu:0", "transpose": "cpu:1", "add": "cpu:2",
                     "sort": "cpu:2", "cumsum": "cpu:2", "sum": "cpu:2"}


def test_c_mixed_precision_with_stand_in_accelerator(sample_run):
    proc = sample_run("placement_mixed_precision", "--policy", POLICIES / "mixed_precision.toml", devices=4)
    out = proc.run
    assert proc.returncode == 0, proc.stderr
    ops = ops_of(out)
    (matmul,) = [o for o in ops if o[0] == "matmul"]
    (total,) = [o for o in ops if o[0] == "sum"]
    assert matmul[1] == "cpu:1" and matmul[2].endswith("rule 1")
    assert total[1] == "cpu:0" and total[2].endswith("rule 2")
    assert markers_of(out, "policy-note") == ["alias accel: gpu:0 not present, using cpu:1"]
    notes = audit_json(out)["notes"]
    assert "placement: alias accel: gpu:0 not present, using cpu:1" in notes  # audit says so
    # moves: the matmul's float16 inputs 256x128x2 + 128x64x2 = 81,920 B to cpu:1; the
    # float32 cast of its result follows its data (cpu:1), and the reduction moves that
    # 256x64x4 = 65,536 B back to cpu:0: 3 transfers, 147,456 B.
    assert ("placement: policy rules:mixed_precision.toml placed 2 ops (granularity unit); "
            "its moves: 3 transfers, 147456 bytes; fallbacks: 0") in notes
    plain = sample_run("placement_mixed_precision", devices=4)
    assert plain.returncode == 0, plain.stderr
    assert proc.stdout == plain.stdout


def test_d_layer_i_on_device_i_mod_4(sample_run):
    proc = sample_run("placement_layers", "--policy", f"{POLICIES}/placers.py:layer_placer", devices=4)
    out = proc.run
    assert proc.returncode == 0, proc.stderr
    matmuls = [d for name, d, _, _ in ops_of(out) if name == "matmul"]
    assert matmuls == ["cpu:0", "cpu:1", "cpu:2", "cpu:3", "cpu:0", "cpu:1"]
    tanhs = [d for name, d, _, _ in ops_of(out) if name == "tanh"]
    assert tanhs == matmuls  # unplaced ops follow their (committed) data


def test_e_absent_platform_falls_back_with_a_finding(tmp_path):
    proc, out = run_policy(tmp_path, SAMPLES / "placement_families.py", "--policy",
                           POLICIES / "families.toml", "--on-policy-error", "fallback")
    assert proc.returncode == 0, proc.stderr
    where = {name: (dev, placed) for name, dev, placed, _ in ops_of(out)}
    assert where["matmul"] == ("cpu:0", "fallback")
    assert where["sort"][0] == where["cumsum"][0] == "cpu:1"
    assert where["transpose"][0] == where["add"][0] == "cpu:0"
    (msg,) = markers_of(out, "policy-fallback")
    assert "gpu:0" in msg and "placement_families.py:17" in msg
    (finding,) = [f for f in audit_json(out)["findings"] if f["rule"] == "policy-fallback"]
    assert finding["line"] == 17 and finding["count"] == 1 and finding["severity"] == "warning"
    assert "gpu:0" in finding["message"]


def test_e_absent_platform_without_fallback_is_one_line_exit_2(tmp_path):
    proc, out = run_policy(tmp_path, SAMPLES / "placement_families.py", "--policy", POLICIES / "families.toml")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("jaxplace: error: policy rules:families.toml failed for op matmul (float32[8, 8], float32[8, 8])")
    assert "placement_families.py:17" in line and "--on-policy-error fallback" in line
    # what ran before the error is saved and auditable
    assert [n for n, *_ in ops_of(out)] == ["asarray"]
    assert audit_json(out)["run"]["status"] == "failed"


def test_policy_that_raises(tmp_path):
    proc, out = run_policy(tmp_path, SAMPLES / "placement_layers.py", "--policy",
                           f"{POLICIES}/placers.py:failing_placer")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "failed for op matmul (float32[16, 32], float32[32, 32])" in line
    assert "placement_layers.py:17" in line and "KeyError" in line
    assert len(ops_of(out)) == 7  # 6 asarray + ones recorded before the failing matmul


@pytest.mark.parametrize("content, key", [
    ('[[rule]]\nop = "matmul"\ndevcie = "cpu:0"\n', "devcie"),
    ('[[rule]]\nop = "matmul"\ndevice = "cpu:0"\npass = "sideways"\n', "pass"),
    ('[[rule]]\nsite = "train.py"\ndevice = "cpu:0"\n', "site"),
    ('[[rule]]\nop = "matmul"\ndevice = "cpu 0"\n', "cpu 0"),
    ('[defaults]\ndevice = "cpu:0"\n', "defaults"),
    ('[[rule]]\nop = "matmul"\n', "device"),
    ('not toml at all [', "TOML"),
])
def test_bad_rules_file_rejected_before_the_script_runs(tmp_path, content, key):
    policy = tmp_path / "bad.toml"
    policy.write_text(content)
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    proc = jaxplace("run", "-q", "--no-trace", "--policy", policy, "--out", tmp_path / "r", script)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("jaxplace: error:") and key in line and "bad.toml" in line
    assert not marker.exists() and not (tmp_path / "r").exists()


def test_unknown_policy_and_missing_callable(tmp_path):
    script = SAMPLES / "placement_families.py"
    for policy, text in (("zigzag", "unknown policy 'zigzag'"),
                         (f"{POLICIES}/placers.py:nope", "defines no 'nope'"),
                         ("no_such_module_xyz:placer", "cannot import no_such_module_xyz")):
        proc = jaxplace("run", "-q", "--policy", policy, "--out", tmp_path / "r", script)
        assert proc.returncode == 2 and text in proc.stderr and len(proc.stderr.splitlines()) == 1


# -- granularity op: a jitted training step, forward and backward placed by rules ---------------

GRAN_RULES = """
version = 1
[[rule]]
op = "matmul"
pass = "forward"
device = "cpu:1"
[[rule]]
pass = "backward"
device = "cpu:2"
[default]
device = "cpu:3"
"""


def _train(steps=3):
    import jax
    import jax.numpy as jnp

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    @jax.jit
    def step(w, x):
        value, grad = jax.value_and_grad(loss)(w, x)
        return w - 0.1 * grad, value

    w = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)).astype(np.float32))
    x = jnp.asarray(np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8))
    losses = []
    for _ in range(steps):
        w, value = step(w, x)
        losses.append(value)
    return w, losses


def test_granularity_op_places_forward_and_backward_inside_jit(tmp_path):
    from jaxplace_cli import device_placement, where
    from jaxplace_cli.capture.jaxhooks.state import active
    from jaxplace_cli.model.events import OpEvent

    ref_w, ref_losses = _train()
    rules = tmp_path / "gran.toml"
    rules.write_text(GRAN_RULES)
    with device_placement(str(rules), granularity="op"):
        w, losses = _train()
        segments = [OpEvent._make(s[:13]) for s in active.rec.ops if s[4] == "segment"]  # raw rows: see dispatch.py
    np.testing.assert_allclose(np.asarray(w), np.asarray(ref_w), rtol=1e-6)
    np.testing.assert_allclose([float(v) for v in losses], [float(v) for v in ref_losses], rtol=1e-6)
    assert where(w) == "cpu:3"
    # per step: fwd matmul (cpu:1), rest of forward (cpu:3), backward (cpu:2), update (cpu:3)
    assert [(s.devices, s.backward) for s in segments] == [
        ("cpu:1", False), ("cpu:3", False), ("cpu:2", True), ("cpu:3", False)] * 3
    assert segments[0].name == "jit(step)[dot_general]"
    assert "transpose" in segments[2].name and segments[2].placed.endswith("rule 2")


# -- library API -----------------------------------------------------------------------------

def test_device_placement_nesting_restores_and_is_per_thread(jax_devices):
    import jax.numpy as jnp

    from jaxplace_cli import device_placement, where
    from jaxplace_cli.capture.jaxhooks.state import active

    seen = {}
    with device_placement("pin:cpu:1"):
        a = jnp.ones(4) + 1
        with device_placement("pin:cpu:2"):
            b = jnp.ones(4) + 1

            def other_thread():
                seen["thread"] = where(jnp.ones(4) + 1)

            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
        c = jnp.ones(4) + 1
        with pytest.raises(ZeroDivisionError):
            with device_placement("pin:cpu:3"):
                1 / 0
        d = jnp.ones(4) + 1
    e = jnp.ones(4) + 1
    assert (where(a), where(b), where(c), where(d), where(e)) == ("cpu:1", "cpu:2", "cpu:1", "cpu:1", "cpu:0")
    assert seen["thread"] == "cpu:0"  # another thread is not placed by this thread's context
    assert active.rec is None  # the hooks it installed are gone again


@pytest.mark.parametrize("policy", [
    lambda op, *args: "cpu:3" if op == "dot_general" else None,
    lambda op, dtype, shape: "cpu:3" if op == "dot_general" and shape == (4, 4) else None,
    lambda op, shape: "cpu:3" if op == "dot_general" else None,
    lambda info: "cpu:3" if info.name == "dot_general" and info.dtype == np.float32 else None,
])
def test_callable_shapes_people_write(policy):
    import jax
    import jax.numpy as jnp

    from jaxplace_cli import device_placement, where

    with device_placement(policy):
        a = jnp.ones((4, 4))
        b = a @ a
        c = a + 1
    assert (where(a), where(b), where(c)) == ("cpu:0", "cpu:3", "cpu:0")
    assert isinstance(b, jax.Array) and float(b.sum()) == 64.0


def test_callable_returning_device_object_and_bad_returns(jax_devices):
    import jax.numpy as jnp

    from jaxplace_cli import PolicyError, device_placement, where

    with device_placement(lambda op: jax_devices[2]):
        x = jnp.arange(3.0) * 2
    assert where(x) == "cpu:2"
    with pytest.raises(PolicyError, match=r"returned|not 'int'|jax.Device"):
        with device_placement(lambda op: 7):
            jnp.arange(3.0) * 2
    with device_placement(lambda op: "tpu:0", on_error="fallback") as placer:
        y = jnp.arange(3.0) * 2
    assert where(y) == "cpu:0" and placer.fallbacks == 2  # arange and multiply


def test_devices_spec_restricts_rr(jax_devices):
    import jax.numpy as jnp

    from jaxplace_cli import device_placement, where

    with device_placement("rr", devices="cpu:2,cpu:3"):
        placed = [where(jnp.asarray(np.full(3, i, np.float32))) for i in range(4)]
    assert placed == ["cpu:2", "cpu:3", "cpu:2", "cpu:3"]


def test_where_on_pytrees_and_host_data(jax_devices):
    import jax

    from jaxplace_cli import where

    tree = {"a": jax.device_put(np.ones(2), jax_devices[1]), "b": [np.zeros(1)]}
    assert where(tree) == {"a": "cpu:1", "b": ["host"]}


def test_grad_outside_jit_keeps_working_under_placement(jax_devices):
    """jax.grad of a placed computation: values equal the unplaced ones; eager backward
    primitives are recognised as backward and placed by `pass = "backward"`."""
    import jax
    import jax.numpy as jnp

    from jaxplace_cli import device_placement
    from jaxplace_cli.capture.jaxhooks.state import active
    from jaxplace_cli.model.events import OpEvent

    def loss(w):
        return jnp.sum(jnp.tanh(w) ** 2)

    w = jnp.linspace(-1.0, 1.0, 16)
    ref = jax.grad(loss)(w)

    def policy(info):
        return "cpu:2" if info.backward else "cpu:1"

    with device_placement(policy):
        g = jax.grad(loss)(w)
        jit_loss = jax.jit(loss)
        gj = jax.grad(jit_loss)(w)  # grad of a jit function: traced through, not placed
        ops = [OpEvent._make(o[:13]) for o in active.rec.ops]  # raw rows (an eager op may carry 3 more fields)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(ref))
    np.testing.assert_allclose(np.asarray(gj), np.asarray(ref), rtol=1e-6)
    backward = [o for o in ops if o.backward]
    forward = [o for o in ops if not o.backward and o.kind == "prim"]
    assert backward and all(o.devices == "cpu:2" for o in backward)
    assert forward and all(o.devices == "cpu:1" for o in forward)


def test_rr_strict_from_the_library(jax_devices):
    import jax.numpy as jnp

    from jaxplace_cli import device_placement, where

    with device_placement("rr-strict"):
        x = jnp.ones(4)        # op 0 -> cpu:0
        y = x * 2              # op 1 -> cpu:1 (x moved)
        z = y + x              # op 2 -> cpu:2 (both moved)
    assert (where(x), where(y), where(z)) == ("cpu:0", "cpu:1", "cpu:2")
    assert float(z.sum()) == 12.0


def test_placing_never_commits_and_jax_decides_follows_placed_data(jax_devices):
    """A policy's moves keep uncommitted data uncommitted (pmap and multi-device shard_map
    refuse committed single-device inputs), and an op the policy leaves to JAX runs where
    the data it placed lives — the matmul's result is not pulled back to device 0."""
    import jax
    import jax.numpy as jnp

    from jaxplace_cli import device_placement, where

    with device_placement(lambda op, *args: "cpu:1" if op == "dot_general" else None):
        x = jnp.ones((4, 4))
        y = x @ x
        z = y + 1
    assert (where(x), where(y), where(z)) == ("cpu:0", "cpu:1", "cpu:1")
    assert not y._committed and not z._committed and not x._committed
    with device_placement("rr-strict"):
        a = jnp.arange(8.0).reshape(4, 2) * 1.0  # two ops, two devices: a moved copy
        out = jax.pmap(lambda v: v / jax.lax.psum(v.sum(), "i"), axis_name="i")(a)
    assert float(out.sum()) == 1.0 and len(out.sharding.device_set) == 4


DTYPE_CLASSES = """import jax, jax.numpy as jnp, numpy as np
x = jnp.ones(3)
print(x.astype(np.float32), jnp.zeros(2, np.float32), jnp.arange(3, dtype=np.int32))
print(jnp.full((2,), 3, np.int8), x.sum(dtype=np.int32), jnp.mean(x, dtype=np.float32))
print(jnp.cumsum(x, dtype=np.float32), jnp.ones_like(x, dtype=np.int32), jnp.array([1, 2], dtype=np.float32))
print(jax.random.normal(jax.random.key(0), (2,), np.float32).dtype)
"""


@pytest.mark.parametrize("options", [["--policy", "rr"], ["--policy", "pin:cpu:1"], ["--granularity", "op"]])
def test_a_numpy_scalar_type_as_dtype_under_a_policy(tmp_path, options):
    """jnp.zeros(2, np.float32) and friends: a NumPy scalar *class* among the arguments has
    `shape` and `dtype` attributes (its descriptors), and the policy's op description took it for
    an array (TypeError in every such call: a correct program failed under any policy). The
    output is python's, byte for byte."""
    import subprocess
    import sys

    from conftest import child_env

    script = tmp_path / "dtypes.py"
    script.write_text(DTYPE_CLASSES)
    env = child_env()
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    want = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert want.returncode == 0, want.stderr
    got = jaxplace("run", "-q", "--no-trace", "--devices", "4", *options, "--out", tmp_path / "r", script)
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


GUARDED = """import jax, jax.numpy as jnp
a = jnp.ones((4, 4)); b = jnp.arange(16.0).reshape(4, 4)
f = jax.jit(lambda u, v: u @ v)
with jax.transfer_guard("disallow_explicit"):
    c = a * b; d = f(a, c); e = jnp.sin(d) + a; g = f(e, e); print("in guard ok")
print(round(float(g.sum()), 2))  # placement may change the last bits of a float sum
"""


@pytest.mark.parametrize("policy", ["rr", "rr-strict"])
def test_a_policys_moves_pass_the_scripts_transfer_guard(tmp_path, policy):
    """A correct program under jax.transfer_guard("disallow_explicit"): it makes no explicit
    transfer itself; the policy's moves to the devices it chose are the policy's, not the
    script's, and made the program fail (JaxRuntimeError: Disallowed device-to-device transfer)."""
    import subprocess
    import sys

    from conftest import child_env

    script = tmp_path / "guarded.py"
    script.write_text(GUARDED)
    env = child_env()
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    want = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    got = jaxplace("run", "-q", "--no-trace", "--devices", "4", "--policy", policy, "--out", tmp_path / "r", script)
    assert want.returncode == got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    t = audit_json(tmp_path / "r")["transfers"]
    assert t["totals"]["d2d"]["count"] + t["small"]["d2d"]["count"] > 0  # the policy moved data in the block
