"""Issue 4's rules end to end: each sample script that triggers a rule, and its clean twin.

Every sample is recorded once per session (`jaxplace run --devices N --no-trace --quiet`,
conftest's ``sample_run``: other files reuse the same recordings), two at a time, in a
module-scoped fixture; each test then audits a recorded run in-process (`audit --format json`). Expected numbers are worked out by hand from the scripts (comments).
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest
from conftest import REPO, audit_json, cli

KiB, MiB = 1024, 1024 * 1024

# name -> (script, --devices, extra `jaxplace run` options)
RECORDINGS = {
    "pingpong_eager": ("pingpong_eager.py", 2, []),
    "pingpong_clean": ("pingpong_clean.py", 2, []),
    "mlp_host_sync": ("mlp_host_sync.py", 1, []),
    "mlp_clean": ("mlp_clean.py", 1, []),
    "uncommitted_mix": ("uncommitted_mix.py", 2, []),
    "uncommitted_copy_clean": ("uncommitted_copy_clean.py", 2, []),
    "incompatible_devices": ("incompatible_devices.py", 2, []),
    "incompatible_devices_clean": ("incompatible_devices_clean.py", 2, []),
    "fwd_bwd_split": ("fwd_bwd_split.py", 2, []),
    "fwd_bwd_split_clean": ("fwd_bwd_split_clean.py", 2, []),
    "fwd_bwd_by_policy": ("fwd_bwd_split_clean.py", 2, ["--policy", "{policy}"]),
    "recompile_shapes": ("recompile_shapes.py", 1, []),
    "recompile_clean": ("recompile_clean.py", 1, []),
    "imbalance_idle": ("imbalance_idle.py", 3, []),
    "imbalance_clean": ("imbalance_clean.py", 3, []),
}

# The placement engine sends every backward-pass op to cpu:1; JAX decides for the rest.
BACKWARD_ELSEWHERE = 'version = 1\n\n[[rule]]\npass = "backward"\ndevice = "cpu:1"\n'


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, sample_run):
    root = tmp_path_factory.mktemp("audit_rules")
    policy = root / "backward_elsewhere.toml"
    policy.write_text(BACKWARD_ELSEWHERE)

    def record(item):
        name, (script, devices, extra) = item
        rec = sample_run(script, *[o.format(policy=policy) for o in extra], devices=devices)
        return name, (rec.run, rec)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(record, RECORDINGS.items()))


@pytest.fixture(scope="module")
def report(recorded):
    cache = {}

    def get(name: str) -> dict:
        if name not in cache:
            out, proc = recorded[name]
            expected_rc = 1 if name == "incompatible_devices" else 0
            assert proc.returncode == expected_rc, proc.stderr[-2000:]
            cache[name] = audit_json(out)
        return cache[name]

    return get


def findings(r: dict, rule: str) -> list[dict]:
    return [f for f in r["findings"] if f["rule"] == rule]


def basename(f: dict) -> str:
    return f["file"].rsplit("/", 1)[-1]


# ------------------------------------------------------------------------------- pingpong


def test_pingpong_fires_with_every_leg(report):
    (pp,) = findings(report("pingpong_eager"), "pingpong")
    # pingpong_eager.py: line 23 moves 1 MiB cpu:0 -> cpu:1; each of the 4 iterations at line 25
    # moves it back to cpu:0 and the product on to cpu:1 again: 8 moves, each returning the
    # data to a device it had left = 8 returns x 1 MiB (1024*256 float32).
    assert (pp["severity"], basename(pp), pp["line"]) == ("error", "pingpong_eager.py", 25)
    assert (pp["count"], pp["bytes"]) == (8, 8 * MiB)
    assert pp["devices"] == ["cpu:0", "cpu:1"]
    legs = [(r["line"], r["role"]) for r in pp["related"]]
    assert legs == [(23, "leg cpu:0->cpu:1: 1 transfer, 1.0 MiB"),
                    (25, "leg cpu:1->cpu:0: 4 transfers, 4.0 MiB"),
                    (25, "leg cpu:0->cpu:1: 4 transfers, 4.0 MiB")]
    assert "cpu:1->cpu:0 at pingpong_eager.py:25 x4" in pp["message"]


def test_pingpong_clean_twin(report):
    r = report("pingpong_clean")
    assert findings(r, "pingpong") == []
    # the one move (line 24) is still reported as traffic, just not as ping-pong
    assert r["transfers"]["totals"]["d2d"] == {"count": 1, "bytes": MiB}


# ------------------------------------------------------------- host syncs and uploads


def test_host_sync_and_implicit_h2d_per_step(report):
    r = report("mlp_host_sync")
    assert r["steps"]["method"] == "repeated jit call" and r["steps"]["count"] == 30
    (sync,) = findings(r, "host-sync-in-loop")
    # float(loss) at line 43, once per step for 30 steps: 30 blocking reads of a float32 (4 B)
    assert (basename(sync), sync["line"], sync["count"], sync["bytes"]) == ("mlp_host_sync.py", 43, 30, 120)
    # steady state = steps 1..29 (step 0 is warm-up): exactly one read in each
    assert sync["per_step"] == {"steps": 30, "method": "repeated jit call", "min": 1, "median": 1, "max": 1}
    assert "1 per step over 30 steps" in sync["message"]
    (up,) = findings(r, "implicit-h2d-in-loop")
    assert up["severity"] == "info"  # a new batch each step: a loader's upload (issue 26)
    # the numpy batch x (64 x 128 float32 = 32,768 B) passed to step() at line 42, 30 times;
    # y (64 x 1 float32 = 256 B) is below --min-bytes (1 KiB), so it is not part of the finding
    assert (up["line"], up["count"], up["bytes"]) == (42, 30, 30 * 32_768)
    assert up["per_step"]["median"] == 1 and up["per_step"]["bytes_median"] == 32_768
    # the per-step view counts every transfer of a step, small ones too (as totals + small do):
    # x and y up (32,768 + 256 B) and the 4-byte loss down, in each of the 30 steps
    st = r["steps"]
    assert st["per_step"]["h2d"] == {"counts": [2] * 30, "bytes": [33_024] * 30}
    assert st["per_step"]["d2h"] == {"counts": [1] * 30, "bytes": [4] * 30}
    assert st["steady_state"]["d2h"] == {"min": 1, "median": 1, "max": 1, "bytes_min": 4, "bytes_median": 4,
                                         "bytes_max": 4}
    jsonschema.validate(r, json.loads((REPO / "docs" / "audit-json-schema.json").read_text()))


def test_clean_mlp_has_no_error_and_no_loop_findings(report):
    r = report("mlp_clean")
    assert [f for f in r["findings"] if f["severity"] == "error"] == []
    assert {f["rule"] for f in r["findings"]} & {"host-sync-in-loop", "implicit-h2d-in-loop",
                                                  "recompile", "pingpong"} == set()


# ----------------------------------------------------------------------- uncommitted copy


def test_uncommitted_copy_same_array_again_and_again(report):
    (f,) = findings(report("uncommitted_mix"), "uncommitted-copy")
    # bias = jnp.ones((256, 256)) (line 21) is uncommitted on cpu:0; each of the 10
    # `w + bias` at line 24 runs on cpu:1 and copies it: 10 x 256*256*4 = 10 x 262,144 B.
    assert (basename(f), f["line"], f["count"], f["bytes"]) == ("uncommitted_mix.py", 24, 10, 2_621_440)
    assert f["devices"] == ["cpu:0", "cpu:1"]
    assert {(r["line"], r["role"]) for r in f["related"]} == {
        (24, "copied to cpu:1 here 10 times"), (21, "created here (uncommitted, on cpu:0)")}
    assert "created at uncommitted_mix.py:21" in f["message"]


def test_uncommitted_copy_clean_twin(report):
    r = report("uncommitted_copy_clean")
    assert findings(r, "uncommitted-copy") == []
    assert r["transfers"]["totals"]["d2d"]["count"] == 2  # bias and w moved once each


# ------------------------------------------------------------------ incompatible devices


def test_incompatible_devices_names_both_origins(report):
    r = report("incompatible_devices")
    assert r["run"]["status"] == "failed" and r["run"]["exit_code"] == 1
    (f,) = findings(r, "incompatible-devices")
    assert (f["severity"], basename(f), f["line"], f["count"]) == ("error", "incompatible_devices.py", 32, 1)
    assert f["devices"] == ["cpu:0", "cpu:1"]
    # params: device_put of host data to device 0 at line 30; batch: device_put to device 1
    # inside load_batch (line 23); the argument names come from JAX's own message.
    assert "argument params (float32[256,10]) is on cpu:0" in f["message"]
    assert "argument batch (float32[32,256]) is on cpu:1" in f["message"]
    assert [(r["line"], r["role"]) for r in f["related"]] == [
        (30, "argument params put on cpu:0 and committed here (jax.device_put)"),
        (23, "argument batch put on cpu:1 and committed here (jax.device_put)")]


def test_incompatible_devices_clean_twin(report):
    r = report("incompatible_devices_clean")
    assert r["run"]["status"] == "complete" and findings(r, "incompatible-devices") == []


# -------------------------------------------------------------------------- fwd/bwd split


def test_fwd_bwd_split_explicit_residual_move(recorded, report):
    r = report("fwd_bwd_split")
    (f,) = findings(r, "fwd-bwd-split")
    # jax.vjp(loss, w, x) on cpu:0 keeps 4 residuals (jax 0.10.2): w (64x64 float32 = 16,384 B),
    # x (32x64 = 8,192 B) and two 32x64 intermediates of tanh (8,192 B each) = 40,960 B; the
    # script prints that sum. Line 33 moves them to cpu:1 every step, 3 steps: 12 transfers,
    # 3 x 40,960 = 122,880 B. The 4-byte cotangent made by jnp.ones is not forward data.
    _, proc = recorded["fwd_bwd_split"]
    assert "residual bytes per step 40960" in proc.stdout
    assert (f["severity"], basename(f), f["line"]) == ("warning", "fwd_bwd_split.py", 34)
    assert (f["count"], f["bytes"]) == (12, 122_880)
    assert f["devices"] == ["cpu:0", "cpu:1"]
    roles = {(r["line"], r["role"]) for r in f["related"]}
    assert (33, "forward data moved cpu:0->cpu:1 here (12 transfers)") in roles
    assert {(19, "forward ran on cpu:0 here"), (20, "forward ran on cpu:0 here")} <= roles
    assert "3 backward passes" in f["message"]


def test_fwd_bwd_split_by_placement_policy(report):
    (f,) = findings(report("fwd_bwd_by_policy"), "fwd-bwd-split")
    # The clean twin under a rules file sending backward ops to cpu:1. Per step the placer moves
    # each forward array a backward op reads, at every read (jax 0.10.2's transpose of
    # sum(h * h), h = tanh(x @ w)): h three times and the tanh derivative once (4 x 8,192 B),
    # x once (8,192 B), w once (16,384 B) = 6 transfers, 57,344 B; x 3 steps = 18, 172,032 B.
    assert (basename(f), f["line"]) == ("fwd_bwd_split_clean.py", 31)
    assert (f["count"], f["bytes"]) == (18, 172_032)
    assert "read 8 forward arrays" in f["message"]  # 2 per step + w and x, the same each step


def test_fwd_bwd_split_clean_twin(report):
    assert findings(report("fwd_bwd_split_clean"), "fwd-bwd-split") == []


# ------------------------------------------------------------------------------- recompile


def test_recompile_says_the_shape_changed(report):
    (f,) = findings(report("recompile_shapes"), "recompile")
    # score() at line 27 with lengths 37, 64, 91, 128, 64, 37: 4 distinct shapes -> 4 compiles
    # (> the default threshold 2); 3 changes between consecutive compiles, all of arg 0's shape.
    assert (basename(f), f["line"], f["count"]) == ("recompile_shapes.py", 27, 4)
    assert f["time_ns"] > 0
    assert "jit(score) was compiled 4 times" in f["message"]
    assert "shape x3" in f["message"]
    assert ("arg 0: float32[37,32] -> float32[64,32]; arg 0: float32[64,32] -> float32[91,32]; "
            "arg 0: float32[91,32] -> float32[128,32]") in f["message"]
    assert f["fix"].startswith("pad or bucket")


def test_recompile_clean_twin(report):
    assert findings(report("recompile_clean"), "recompile") == []


# --------------------------------------------------------------------- imbalance and idle


def test_imbalance_and_idle_device(report):
    r = report("imbalance_idle")
    by_dev = r["ops"]["by_device"]
    # 40 step() calls on cpu:0 (line 26), 2 on cpu:1 (line 28), none on cpu:2, plus 2
    # device_put calls per used device (w and x) in the ops summary; the rule counts only compute.
    assert {d: v["count"] for d, v in by_dev.items()} == {"cpu:0": 40 + 2, "cpu:1": 2 + 2}
    (imb,) = findings(r, "imbalance")
    assert (imb["severity"], basename(imb), imb["line"], imb["count"]) == ("warning", "imbalance_idle.py", 26, 40)
    assert imb["devices"] == ["cpu:0", "cpu:1"] and imb["time_ns"] > 0
    # every step() call is counted at the median step() dispatch time: 40 / 2 = 20x
    assert "20.0x the least busy device cpu:1 (2 ops" in imb["message"]
    (idle,) = findings(r, "idle-device")
    assert (idle["severity"], idle["count"], idle["devices"]) == ("warning", 1, ["cpu:2"])


def test_balanced_twin(report):
    r = report("imbalance_clean")
    # 42 steps dealt round-robin: 14 per device (+ 2 device_puts each), and the one
    # jax.device_get of the three results at the end, listed under all three devices
    assert {d: v["count"] for d, v in r["ops"]["by_device"].items()} == {
        "cpu:0": 16, "cpu:1": 16, "cpu:2": 16, "cpu:0,cpu:1,cpu:2": 1}
    assert findings(r, "imbalance") == findings(r, "idle-device") == []
    # one compile per device is not a recompile
    assert findings(r, "recompile") == []


def test_serial_two_device_script_is_not_imbalance(report):
    # uncommitted_mix makes data on cpu:0 and adds on cpu:1: no op name ran on both devices,
    # so there is no spread work to be unbalanced.
    assert findings(report("uncommitted_mix"), "imbalance") == []


# ------------------------------------------------------------------------- rule selection


def test_rule_and_ignore_select(recorded, report):
    out, _ = recorded["imbalance_idle"]
    only = audit_json(out, "--rule", "idle-device")
    assert [f["rule"] for f in only["findings"]] == ["idle-device"]
    assert only["rules"]["checked"] == ["idle-device"]
    rest = audit_json(out, "--ignore", "imbalance")
    assert "imbalance" not in {f["rule"] for f in rest["findings"]}
    full = report("imbalance_idle")
    assert full["rules"]["unsupported"] == {"host-offload": full["rules"]["unsupported"]["host-offload"]}
    assert "recompile" in full["rules"]["checked"]


def test_text_report_renders_new_fields(recorded):
    out, _ = recorded["pingpong_eager"]
    proc = cli("audit", out, "--format", "text")
    assert proc.returncode == 0, proc.stderr
    assert "Transfers per route" in proc.stdout
    assert "leg cpu:1->cpu:0: 4 transfers" in proc.stdout
    assert "cost: 8× · 8.0 MiB" in proc.stdout
    json.loads(cli("audit", out, "--format", "json").stdout)  # still valid JSON
