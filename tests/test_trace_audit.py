"""`jaxplace audit` on foreign jax.profiler traces: exact totals for every fixture in
tests/data/foreign_traces, a multi-host log dir (per host and merged), broken input.

Each fixture is copied into a temporary directory first and audited there through
`python -m jaxplace_cli audit DIR --format json` (reading must not write next to the trace).
Expected numbers were derived from the raw ProfileData events by an independent loop (the
rules of tests/data/foreign_traces/derive_expected.py, split per device and at the 1 KiB
--min-bytes threshold); the arithmetic is in the comments.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import cli

DATA = Path(__file__).parent / "data" / "foreign_traces"
FIXTURES = {
    "v100": DATA / "tf-gpu-v100-multiworker-bert" / "34.83.195.179_6003.xplane.pb",
    "tpu": DATA / "jax-tpu-v6e-host-offload" / "tpu_inference_2.xplane.pb",
    "mi300_d2d": DATA / "jax-rocm-mi300x-8gpu-conv-d2d" / "chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb",
    "mi300_conv": DATA / "jax08-rocm-mi300x-8gpu-conv" / "tw003.xplane.pb",
    "mi300_gemm": DATA / "jax08-rocm-mi300x-gemm" / "tw003.xplane.pb",
    "mi355_attn": DATA / "jax-rocm-mi355x-te-fused-attn" / "934987a2fc2f.xplane.pb",
}
GiB5 = 5368709120  # f32[5,1024,1024,256] = 5 * 2**30 B, the TPU fixture's transfer size
GPUS = [f"gpu:{i}" for i in range(8)]
ZERO = {"count": 0, "bytes": 0}
NO_OFFLOAD = {"totals": {"h2d": ZERO, "d2h": ZERO, "d2d": ZERO},
              "unknown_size": {"h2d": 0, "d2h": 0, "d2d": 0}}


def route(kind, src, dst, count=0, nbytes=0, small=0, small_bytes=0, unknown=0, blocking=0):
    return {"kind": kind, "src": src, "dst": dst, "count": count, "bytes": nbytes,
            "small_count": small, "small_bytes": small_bytes, "unknown_size": unknown,
            "blocking": blocking}


def totals(h2d=ZERO, d2h=ZERO, d2d=ZERO):
    return {"h2d": h2d, "d2h": d2h, "d2d": d2d}


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """name -> (copy dir, files in it before, CompletedProcess of `audit DIR --format json`)."""
    root = tmp_path_factory.mktemp("foreign")

    def run(item):
        name, src = item
        d = root / name
        d.mkdir()
        shutil.copy(src, d / src.name)
        before = sorted(p.name for p in d.iterdir())
        return name, (d, before, cli("audit", d, "--format", "json"))

    return dict(map(run, FIXTURES.items()))  # in-process (conftest.cli): one at a time


@pytest.fixture(scope="module")
def report(audited):
    import json

    def get(name):
        d, before, proc = audited[name]
        assert proc.returncode == 0, proc.stderr
        assert sorted(p.name for p in d.iterdir()) == before  # nothing written next to the trace
        return json.loads(proc.stdout)

    return get


def rules(r):
    return {f["rule"]: f for f in r["findings"]}


def test_v100_tensorflow_memcpy(report):
    r = report("v100")
    assert r["source"] == "trace" and r["devices"] == GPUS
    t = r["transfers"]
    # h2d sizes: 2 x 3072 + 12 x 6144 = 79,872 B are >= 1 KiB; the other 188 (10 x 1 + 26 x 2
    # + 128 x 4 + 12 x 8 + 8 x 16 + 4 x 112 = 1,246 B) are small. d2h: 12 x 6144 = 73,728 B,
    # small 4 x 8 + 8 x 16 = 160 B. No d2d. Every size is known.
    assert t["totals"] == totals({"count": 14, "bytes": 79_872}, {"count": 12, "bytes": 73_728})
    assert t["small"] == totals({"count": 188, "bytes": 1_246}, {"count": 12, "bytes": 160})
    assert t["unknown_size"] == {"h2d": 0, "d2h": 0, "d2d": 0}
    assert t["sites"] == [] and t["offload"] == NO_OFFLOAD
    # per device: gpu:6 h2d 1 x 3072 + 6 x 6144 = 39,936 B, small 5x1 + 13x2 + 64x4 + 6x8 +
    # 4x16 + 2x112 = 623 B; gpu:4 6 x 6144 = 36,864 B, small 3x1 + 61x4 + 6x8 + 4x16 + 2x112
    # = 583 B; gpu:1 1 x 3072, small 2x1 + 13x2 + 3x4 = 40 B. 'async:0' on 2 copies to each
    # of gpu:4 and gpu:6. d2h from gpu:4 and gpu:6 each 6 x 6144 = 36,864 B, small 2x8 + 4x16.
    assert t["routes"] == [
        route("h2d", "host", "gpu:6", 7, 39_936, 94, 623, blocking=2),
        route("h2d", "host", "gpu:4", 6, 36_864, 76, 583, blocking=2),
        route("h2d", "host", "gpu:1", 1, 3_072, 18, 40),
        route("d2h", "gpu:4", "host", 6, 36_864, 6, 80),
        route("d2h", "gpu:6", "host", 6, 36_864, 6, 80),
    ]
    # 665 kernels on each of gpu:4 and gpu:6; their device time
    assert r["ops"]["total"] == 1330
    assert {d: (v["count"], v["device_ns"]) for d, v in r["ops"]["by_device"].items()} == {
        "gpu:4": (665, 14_825_385), "gpu:6": (665, 14_865_363)}
    f = rules(r)
    assert set(f) == {"idle-device"}  # 14.87 ms vs 14.83 ms is balanced
    assert (f["idle-device"]["severity"], f["idle-device"]["devices"]) == (
        "warning", ["gpu:0", "gpu:1", "gpu:2", "gpu:3", "gpu:5", "gpu:7"])
    (host,) = r["hosts"]
    assert (host["host"], host["step_count"]) == ("34.83.195.179_6003", 1)
    assert host["transfers"]["totals"] == t["totals"]
    assert r["trace"]["run"] is None and len(r["trace"]["files"]) == 1


def test_tpu_host_transfers_and_offload(report):
    r = report("tpu")
    t = r["transfers"]
    # TransferToDevice: 12 x 5 GiB (3 to each chip) + 1 x 512 B (small, to tpu:0);
    # TransferFromDevice: 16 x 5 GiB, all from tpu:0 (device_ordinal 4 = tpu:0's global core).
    assert t["totals"] == totals({"count": 12, "bytes": 12 * GiB5}, {"count": 16, "bytes": 16 * GiB5})
    assert t["totals"]["h2d"]["bytes"] == 64_424_509_440
    assert t["small"] == totals({"count": 1, "bytes": 512})
    assert t["routes"] == [route("h2d", "host", "tpu:0", 3, 3 * GiB5, 1, 512)] + [
        route("h2d", "host", f"tpu:{i}", 3, 3 * GiB5) for i in (1, 2, 3)] + [
        route("d2h", "tpu:0", "host", 16, 16 * GiB5)]
    # host offload: 3 prefetch + 3 offload copy-starts x 100 runs x 4 chips, 5 GiB each
    assert t["offload"] == {"totals": totals({"count": 1200, "bytes": 1200 * GiB5},
                                             {"count": 1200, "bytes": 1200 * GiB5}),
                            "unknown_size": {"h2d": 0, "d2h": 0, "d2d": 0}}
    f = rules(r)
    assert set(f) == {"host-offload"}  # four chips, all busy, ~2.7 s each: balanced
    off = f["host-offload"]
    assert (off["severity"], off["count"], off["bytes"]) == ("info", 2400, 2400 * GiB5)
    assert off["devices"] == ["tpu:0", "tpu:1", "tpu:2", "tpu:3"]
    assert {d: v["count"] for d, v in r["ops"]["by_device"].items()} == {
        "tpu:0": 304, "tpu:1": 303, "tpu:2": 303, "tpu:3": 303}
    assert r["ops"]["by_device"]["tpu:2"]["device_ns"] == 2_650_663_293


def test_mi300x_device_to_device_with_sizes(report):
    r = report("mi300_d2d")
    # 53 CopyDeviceToDevice gpu:0 -> gpu:2, 'size:655360' each: 53 x 655,360 = 34,734,080 B
    assert r["transfers"]["totals"] == totals(d2d={"count": 53, "bytes": 34_734_080})
    assert r["transfers"]["routes"] == [route("d2d", "gpu:0", "gpu:2", 53, 34_734_080)]
    idle = rules(r)["idle-device"]
    # only gpu:7 ran kernels (25); gpu:0 and gpu:2 only copied
    assert (idle["severity"], idle["count"]) == ("info", 7)
    assert "gpu:0, gpu:2 only took part in transfers" in idle["message"]


def test_mi300x_copies_without_size_are_unknown_not_zero(report):
    r = report("mi300_conv")
    # 35 copyBuffer kernels on gpu:0, none with a size; the other end is not named
    assert r["transfers"]["totals"] == totals() and r["transfers"]["small"] == totals()
    assert r["transfers"]["unknown_size"] == {"h2d": 0, "d2h": 0, "d2d": 35}
    assert r["transfers"]["routes"] == [route("d2d", "gpu:0", "gpu:?", unknown=35)]
    assert any(n.startswith("35 transfers have no size in this trace") for n in r["notes"])
    # 25 conv kernels on every GPU: nothing idle, nothing unbalanced
    assert r["ops"]["total"] == 200 and r["findings"] == []


def test_mi300x_gemm_h2d_and_d2d_unknown(report):
    r = report("mi300_gemm")
    assert r["transfers"]["unknown_size"] == {"h2d": 12, "d2h": 0, "d2d": 12}
    assert r["transfers"]["totals"] == totals()
    assert r["transfers"]["routes"] == [route("h2d", "host", "gpu:0", unknown=12),
                                        route("d2d", "gpu:0", "gpu:?", unknown=12)]
    assert r["ops"]["by_device"] == {"gpu:0": {"count": 30, "dispatch_ns": 0,
                                               "device_ns": 3_387_604, "top": []}}


def test_no_transfer_fixture_reports_zero(report):
    r = report("mi355_attn")
    t = r["transfers"]
    assert t["totals"] == t["small"] == totals()
    assert t["unknown_size"] == {"h2d": 0, "d2h": 0, "d2d": 0}
    assert t["routes"] == [] and t["offload"] == NO_OFFLOAD
    assert [f["rule"] for f in r["findings"]] == ["idle-device"]  # one GPU of 8 used: info
    assert r["findings"][0]["severity"] == "info"


def test_trace_says_which_rules_need_a_run(report):
    r = report("mi355_attn")
    assert set(r["rules"]["unsupported"]) == {
        "pingpong", "host-sync-in-loop", "implicit-h2d-in-loop", "repeated-put", "uncommitted-copy",
        "incompatible-devices", "fwd-bwd-split", "recompile", "policy-fallback"}
    assert all(v.startswith("needs a jaxplace run") for v in r["rules"]["unsupported"].values())
    assert r["rules"]["checked"] == ["imbalance", "idle-device", "host-offload"]
    assert any("not checked on a foreign trace" in n for n in r["notes"])


# --------------------------------------------------------------------------- multi-host


def _multi_host(root: Path) -> Path:
    old = root / "plugins" / "profile" / "2025_01_01_00_00_00"
    new = root / "plugins" / "profile" / "2025_01_02_00_00_00"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    shutil.copy(FIXTURES["mi300_gemm"], old / "worker0.xplane.pb")
    shutil.copy(FIXTURES["v100"], new / "worker0.xplane.pb")
    shutil.copy(FIXTURES["mi300_d2d"], new / "worker1.xplane.pb")
    return root


def test_multi_host_log_dir_per_host_and_merged(tmp_path):
    import json

    root = _multi_host(tmp_path)
    proc = cli("audit", root, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["trace"]["run"] == "2025_01_02_00_00_00"  # the newest run by default
    assert r["trace"]["runs"] == ["2025_01_01_00_00_00", "2025_01_02_00_00_00"]
    assert any("2 profiling runs" in n for n in r["notes"])
    # per host: each host's own totals and device names
    w0, w1 = r["hosts"]
    assert (w0["host"], w1["host"]) == ("worker0", "worker1")
    assert w0["transfers"]["totals"] == totals({"count": 14, "bytes": 79_872}, {"count": 12, "bytes": 73_728})
    assert w1["transfers"]["totals"] == totals(d2d={"count": 53, "bytes": 34_734_080})
    assert w1["transfers"]["routes"] == [route("d2d", "gpu:0", "gpu:2", 53, 34_734_080)]
    assert w0["devices"] == GPUS and w0["step_count"] == 1 and w1["step_count"] is None
    # merged: the sums, with device names qualified by host (both hosts number from gpu:0)
    assert r["transfers"]["totals"] == totals({"count": 14, "bytes": 79_872},
                                              {"count": 12, "bytes": 73_728},
                                              {"count": 53, "bytes": 34_734_080})
    assert r["transfers"]["small"]["h2d"] == {"count": 188, "bytes": 1_246}
    assert r["devices"] == [f"worker0/{g}" for g in GPUS] + [f"worker1/{g}" for g in GPUS]
    assert route("d2d", "worker1/gpu:0", "worker1/gpu:2", 53, 34_734_080) in r["transfers"]["routes"]
    assert r["ops"]["total"] == 665 + 665 + 25
    f = rules(r)
    # busy: worker0/gpu:4, worker0/gpu:6 (665 kernels each) and worker1/gpu:7 (25); the other
    # 13 of 16 are idle. worker0/gpu:6's 14,865,363 ns >= 4.0 x worker1/gpu:7's 3,586,493 ns
    # (ratio 4.14): the straggler comparison is across hosts.
    assert f["idle-device"]["count"] == 13 and f["idle-device"]["severity"] == "warning"
    assert f["imbalance"]["devices"] == ["worker0/gpu:4", "worker0/gpu:6", "worker1/gpu:7"]
    assert f["imbalance"]["time_ns"] == 14_865_363 and f["imbalance"]["count"] == 665
    text = cli("audit", root, "--format", "text")
    assert text.returncode == 0 and "Per host (2 hosts" in text.stdout


def test_run_selects_an_older_profiling_run(tmp_path):
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.trace_audit import audit_trace

    root = _multi_host(tmp_path)
    r = audit_trace(root, RuleConfig(), run="2025_01_01_00_00_00")
    assert r.trace.run == "2025_01_01_00_00_00" and [h.host for h in r.hosts] == ["worker0"]
    assert r.summary.unknown_size == {"h2d": 12, "d2h": 0, "d2d": 12}


# --------------------------------------------------------------------------- broken input


def _one_line_error(proc):
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.startswith("jaxplace: error: ") and "\n" not in err and "Traceback" not in err
    assert proc.stdout == ""
    return err


def test_truncated_trace_is_one_line_exit_2(tmp_path):
    data = FIXTURES["v100"].read_bytes()
    bad = tmp_path / "half.xplane.pb"
    bad.write_bytes(data[: len(data) // 2])
    err = _one_line_error(cli("audit", bad, "--format", "json"))
    assert "truncated or corrupt" in err


def test_empty_trace_in_a_log_dir_is_one_line_exit_2(tmp_path):
    run = tmp_path / "plugins" / "profile" / "2025_01_01_00_00_00"
    run.mkdir(parents=True)
    (run / "host.xplane.pb").write_bytes(b"")
    err = _one_line_error(cli("audit", tmp_path))
    assert "empty" in err


def test_trace_error_becomes_input_error(tmp_path):
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.run import InputError
    from jaxplace_cli.analysis.trace_audit import audit_trace

    (tmp_path / "x.xplane.pb").write_bytes(b"\x00garbage")
    with pytest.raises(InputError) as ei:
        audit_trace(tmp_path, RuleConfig())
    assert "\n" not in str(ei.value)
    with pytest.raises(InputError):
        audit_trace(tmp_path, RuleConfig(), run="nope")
