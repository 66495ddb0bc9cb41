"""Tests for jaxplace_cli.sources.xplane: real foreign traces, trace-dir layouts, broken files.

Every expected number below was derived independently of the reader, by
``tests/data/foreign_traces/derive_expected.py`` (plain loops over the raw ProfileData events;
run it to re-derive), and cross-checked against ``tests/data/foreign_traces/SOURCES.md``.
"""
from __future__ import annotations

import functools
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from jaxplace_cli.model.events import D2D, D2H, H2D, HOST, TransferEvent
from jaxplace_cli.sources.xplane import (
    TraceData,
    TraceError,
    _offload,
    find_trace_files,
    list_runs,
    read_trace,
    read_traces,
)

DATA = Path(__file__).parent / "data" / "foreign_traces"
V100 = DATA / "tf-gpu-v100-multiworker-bert" / "34.83.195.179_6003.xplane.pb"
TPU = DATA / "jax-tpu-v6e-host-offload" / "tpu_inference_2.xplane.pb"
MI300_D2D = (DATA / "jax-rocm-mi300x-8gpu-conv-d2d"
             / "chi-mi300x-013.ord.vultr.cpe.ice.amd.com.xplane.pb")
MI300_CONV = DATA / "jax08-rocm-mi300x-8gpu-conv" / "tw003.xplane.pb"
MI300_GEMM = DATA / "jax08-rocm-mi300x-gemm" / "tw003.xplane.pb"
MI355_ATTN = DATA / "jax-rocm-mi355x-te-fused-attn" / "934987a2fc2f.xplane.pb"
ALL = [V100, TPU, MI300_D2D, MI300_CONV, MI300_GEMM, MI355_ATTN]
GPUS = [f"gpu:{i}" for i in range(8)]


@functools.cache
def read(path: Path) -> TraceData:
    return read_trace(path)


def totals(transfers) -> dict[str, tuple[int, int, int]]:
    """kind -> (count, count with unknown size, byte sum of the known sizes)."""
    out = {}
    for kind in (H2D, D2H, D2D):
        ts = [t for t in transfers if t.kind == kind]
        if ts:
            out[kind] = (len(ts), sum(t.bytes < 0 for t in ts),
                         sum(t.bytes for t in ts if t.bytes >= 0))
    return out


def per_device(transfers) -> Counter:
    """(kind, the device end of the copy: dst for h2d, src otherwise) -> count."""
    return Counter((t.kind, t.dst if t.kind == H2D else t.src) for t in transfers)


def one_line(e: TraceError) -> str:
    msg = str(e)
    assert msg and "\n" not in msg
    return msg


# --------------------------------------------------------------------------- fixtures


def test_fixtures_are_present_and_intact():
    # Byte sizes from SOURCES.md: a damaged or LFS-pointer copy would fail here first.
    sizes = {V100: 3039638, TPU: 862707, MI300_D2D: 289306, MI300_CONV: 267519,
             MI300_GEMM: 110057, MI355_ATTN: 204412}
    for path, size in sizes.items():
        assert path.stat().st_size == size, path


def test_v100_tensorflow_memcpy():
    t = read(V100)
    assert t.host == "34.83.195.179_6003"
    assert t.devices == GPUS
    # 202 MemcpyH2D device-side events with memcpy_details sizes (GPU:1=19, GPU:4=82,
    # GPU:6=101), 24 MemcpyD2H (GPU:4=12, GPU:6=12), no D2D. The 226 host-side twins pair by
    # correlation_id and are not counted again. Byte sums of the 'size:' fields:
    # h2d 10x1 + 26x2 + 128x4 + 12x8 + 8x16 + 4x112 + 2x3072 + 12x6144 = 81118,
    # d2h 4x8 + 8x16 + 12x6144 = 73888.
    assert totals(t.transfers) == {H2D: (202, 0, 81118), D2H: (24, 0, 73888)}
    assert per_device(t.transfers) == {
        (H2D, "gpu:1"): 19, (H2D, "gpu:4"): 82, (H2D, "gpu:6"): 101,
        (D2H, "gpu:4"): 12, (D2H, "gpu:6"): 12}
    assert {t.src for t in t.transfers if t.kind == H2D} == {HOST}
    assert {t.dst for t in t.transfers if t.kind == D2H} == {HOST}
    # 'async:0' in memcpy_details on 4 device-side MemcpyH2D (GPU:4=2, GPU:6=2).
    assert Counter(x.dst for x in t.transfers if x.blocking) == {"gpu:4": 2, "gpu:6": 2}
    assert {x.api for x in t.transfers} == {"MemcpyH2D", "MemcpyD2H"}
    assert t.offload_transfers == []
    # 'Stream #N(Compute)' kernels: 665 on GPU:4 and GPU:6 (the same count as 'TensorFlow
    # Ops', which is not summed); nothing else runs kernels.
    assert {k: v for k, v in t.device_op_count.items() if v} == {"gpu:4": 665, "gpu:6": 665}
    assert {k: v for k, v in t.device_op_ns.items() if v} == {"gpu:4": 14825385,
                                                               "gpu:6": 14865363}
    assert t.step_count == 1  # one event ('0') on the 'Steps' line of GPU:4 and of GPU:6
    assert "correlation_id" in t.source and "MemcpyH2D x202" in t.source
    assert any("MemCpyAsync" in n for n in t.notes)  # the TF collective copy with no facts


def test_tpu_host_transfers_and_offload():
    t = read(TPU)
    assert t.devices == ["tpu:0", "tpu:1", "tpu:2", "tpu:3"]
    # Base events only: tpu::System::TransferToDevice 13 (12 x 5368709120 + 1 x 512 bytes),
    # TransferFromDevice 16 (16 x 5368709120); their =>IssueEvent(=>Done) twins are skipped.
    assert totals(t.transfers) == {H2D: (13, 0, 12 * 5368709120 + 512),
                                   D2H: (16, 0, 16 * 5368709120)}
    # device_ordinal 4..7 = global_core_id 4..7 in the core_details of planes TPU:0..3:
    # h2d ordinal 4=4, 5=3, 6=3, 7=3; d2h ordinal 4=16.
    assert per_device(t.transfers) == {
        (H2D, "tpu:0"): 4, (H2D, "tpu:1"): 3, (H2D, "tpu:2"): 3, (H2D, "tpu:3"): 3,
        (D2H, "tpu:0"): 16}
    assert any("global_core_id" in n and "4, 5, 6, 7" in n for n in t.notes)
    assert any(n.startswith("58 TPU =>IssueEvent") for n in t.notes)  # 13+16 x 2 variants
    assert any("400 TPU tuple-index-table" in n for n in t.notes)
    # Host offload: copy-start ops on 'XLA Ops' with S(5): 3 prefetch (h2d) + 3 offload (d2h)
    # variants x 100 runs on each of 4 chips = 2400, each f32[5,1024,1024,256] = 5368709120 B.
    off = t.offload_transfers
    assert totals(off) == {H2D: (1200, 0, 1200 * 5368709120), D2H: (1200, 0, 1200 * 5368709120)}
    assert per_device(off) == {(k, f"tpu:{i}"): 300 for k in (H2D, D2H) for i in range(4)}
    assert {x.api for x in off} == {f"xla-host-offload:copy-start{s}"
                                    for s in ("", ".1", ".2", ".3", ".4", ".5")}
    assert any("2,400 XLA host-offload copies" in n for n in t.notes)
    # 'XLA Ops' minus the S(5) copy-start/copy-done events.
    assert t.device_op_count == {"tpu:0": 304, "tpu:1": 303, "tpu:2": 303, "tpu:3": 303}
    assert t.device_op_ns == {"tpu:0": 2736558719, "tpu:1": 2740087503,
                              "tpu:2": 2650663293, "tpu:3": 2737467656}
    assert t.step_count is None  # no 'Steps' line


def test_mi300x_copy_device_to_device():
    t = read(MI300_D2D)
    # 53 CopyDeviceToDevice on GPU:0 'Stream #7..#10(MemcpyOther)', each
    # 'kind:Unknown size:655360 dest:2 async:1' -> 53 x 655360 = 34734080 bytes; the 53
    # hipMemcpyDtoDAsync host calls carry the same correlation_ids.
    assert totals(t.transfers) == {D2D: (53, 0, 34734080)}
    assert Counter((x.src, x.dst) for x in t.transfers) == {("gpu:0", "gpu:2"): 53}
    assert {x.api for x in t.transfers} == {"CopyDeviceToDevice"}
    assert "hipMemcpyDtoDAsync x53" in t.source
    assert {k: v for k, v in t.device_op_count.items() if v} == {"gpu:7": 25}
    assert t.device_op_ns["gpu:7"] == 3586493


def test_mi300x_blit_kernel_copies_have_unknown_size():
    t = read(MI300_CONV)
    # 35 __amd_rocclr_copyBuffer.kd kernels on GPU:0 (no size). 33 pair with a
    # hipMemcpyDtoDAsync ('size:0 dest:512'); 2 have no memcpy call with their
    # correlation_id (the ids belong to hipLaunchHostFunc / hipStreamWaitEvent): d2d assumed.
    assert totals(t.transfers) == {D2D: (35, 35, 0)}
    assert per_device(t.transfers) == {(D2D, "gpu:0"): 35}
    assert {x.dst for x in t.transfers} == {"gpu:?"}
    assert all(x.bytes == -1 for x in t.transfers)
    assert any(n.startswith("35 d2d copies: no size") for n in t.notes)
    assert any(n.startswith("2 __amd_rocclr_copyBuffer kernels") for n in t.notes)
    # 25 conv kernels on each GPU; GPU:0's other 35 events are the copies.
    assert t.device_op_count == {g: 25 for g in GPUS}
    assert t.device_op_ns["gpu:0"] == 3436644


def test_mi300x_gemm_blit_direction_from_host_call():
    t = read(MI300_GEMM)
    # 24 copyBuffer kernels on GPU:0: 12 pair with hipMemcpyHtoDAsync (h2d), 12 with
    # hipMemcpyDtoDAsync (d2d); every memcpy_details says 'size:0', so all sizes are unknown.
    assert totals(t.transfers) == {H2D: (12, 12, 0), D2D: (12, 12, 0)}
    assert per_device(t.transfers) == {(H2D, "gpu:0"): 12, (D2D, "gpu:0"): 12}
    assert {(x.src, x.dst) for x in t.transfers if x.kind == H2D} == {(HOST, "gpu:0")}
    assert any("hlo_op" in n for n in t.notes)  # the d2d copies are HLO 'copy.1' ops
    assert {k: v for k, v in t.device_op_count.items() if v} == {"gpu:0": 30}
    assert t.device_op_ns["gpu:0"] == 3387604


def test_mi355x_fused_attention_has_no_transfers():
    t = read(MI355_ATTN)
    # Negative control: 150 kernels on GPU:0 'Stream #2' (20 of them fillBufferAligned
    # memsets), no memcpy of any kind. The /device:CUSTOM:Megascale Trace plane is skipped.
    assert t.transfers == [] and t.offload_transfers == []
    assert t.devices == GPUS
    assert {k: v for k, v in t.device_op_count.items() if v} == {"gpu:0": 150}
    assert t.device_op_ns["gpu:0"] == 12133585
    assert "no transfer events recognized" in t.source


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.parent.name)
def test_transfer_event_conventions(path):
    t = read(path)
    everything = sorted(t.transfers + t.offload_transfers, key=lambda x: x.seq)
    assert [x.seq for x in everything] == list(range(1, len(everything) + 1))
    assert [x.ts_ns for x in everything] == sorted(x.ts_ns for x in everything)
    for x in everything:
        assert isinstance(x, TransferEvent)
        assert x.bytes == -1 or x.bytes > 0  # unknown is -1, never 0
        assert (x.thread, x.implicit, x.site, x.buf, x.op_seq) == (0, False, 0, 0, 0)
        assert (x.src == HOST) == (x.kind == H2D) and (x.dst == HOST) == (x.kind == D2H)
        assert isinstance(x.ts_ns, int)
    assert set(t.device_op_ns) == set(t.device_op_count) == set(t.devices)


def test_offload_parse():
    h2d = ("%copy-start = (f32[2,3]{1,0:T(8,128)}, f32[2,3]{1,0:T(8,128)S(5)}, u32[]{:S(2)}) "
           "copy-start(f32[2,3]{1,0:T(8,128)S(5)} %param)")
    d2h = ("%copy-start.1 = (bf16[4]{0:S(5)}, bf16[4]{0}, u32[]{:S(2)}) "
           "copy-start(bf16[4]{0} %fusion)")
    assert _offload(h2d) == (H2D, 24, "xla-host-offload:copy-start")
    assert _offload(d2h) == (D2H, 8, "xla-host-offload:copy-start.1")
    assert _offload("%copy-start.2 = (f32[2], f32[2], u32[]) copy-start(f32[2] %p)") is None
    # a shape this reader cannot size is unknown (-1), not guessed
    assert _offload(h2d.replace("f32[2,3]{1,0:T(8,128)S(5)} %", "s4[2,3]{1,0:S(5)} %"))[1] == -1


# --------------------------------------------------------------------------- layouts


def _layout_logdir(root: Path) -> Path:
    older = root / "plugins" / "profile" / "2025_01_01_10_00_00"
    newer = root / "plugins" / "profile" / "2025_01_02_09_00_00"
    older.mkdir(parents=True)
    newer.mkdir(parents=True)
    shutil.copy(MI300_GEMM, older / "hostA.xplane.pb")
    shutil.copy(MI300_D2D, newer / "hostB.xplane.pb")
    (newer / "hostB.trace.json.gz").write_bytes(b"")  # other files in a run dir are ignored
    return root


def test_logdir_newest_run_by_default(tmp_path):
    root = _layout_logdir(tmp_path)
    assert list_runs(root) == ["2025_01_01_10_00_00", "2025_01_02_09_00_00"]
    assert [p.name for p in find_trace_files(root)] == ["hostB.xplane.pb"]
    (t,) = read_traces(root)
    assert t.host == "hostB" and totals(t.transfers) == {D2D: (53, 0, 34734080)}
    # the plugins/profile dir itself works too
    assert [p.name for p in find_trace_files(root / "plugins" / "profile")] == ["hostB.xplane.pb"]


def test_logdir_run_selects(tmp_path):
    root = _layout_logdir(tmp_path)
    (t,) = read_traces(root, run="2025_01_01_10_00_00")
    assert t.host == "hostA" and totals(t.transfers) == {H2D: (12, 12, 0), D2D: (12, 12, 0)}


def test_logdir_unknown_run(tmp_path):
    root = _layout_logdir(tmp_path)
    with pytest.raises(TraceError) as ei:
        find_trace_files(root, run="nope")
    msg = one_line(ei.value)
    assert "'nope'" in msg and "2025_01_01_10_00_00, 2025_01_02_09_00_00" in msg


def test_multi_host_dir(tmp_path):
    shutil.copy(V100, tmp_path / "worker0.xplane.pb")
    shutil.copy(MI355_ATTN, tmp_path / "worker1.xplane.pb")
    (tmp_path / "notes.txt").write_text("not a trace")
    traces = read_traces(tmp_path)
    assert [t.host for t in traces] == ["worker0", "worker1"]
    assert len(traces[0].transfers) == 226 and traces[1].transfers == []
    assert list_runs(tmp_path) == []


def test_single_file_and_run_on_file(tmp_path):
    assert find_trace_files(V100) == [V100]
    with pytest.raises(TraceError) as ei:
        find_trace_files(V100, run="x")
    one_line(ei.value)


# --------------------------------------------------------------------------- broken input


def _expect_trace_error(path, *fragments):
    with pytest.raises(TraceError) as ei:
        read_traces(path)
    msg = one_line(ei.value)
    for f in fragments:
        assert f in msg, msg
    return msg


def test_truncated_file(tmp_path):
    data = V100.read_bytes()
    bad = tmp_path / "half.xplane.pb"
    bad.write_bytes(data[: len(data) // 2])
    _expect_trace_error(bad, "could not be parsed", "truncated or corrupt")


def test_random_bytes(tmp_path):
    bad = tmp_path / "noise.xplane.pb"
    bad.write_bytes(random.Random(1234).randbytes(64 * 1024))
    _expect_trace_error(bad, "not a JAX profiler trace")


def test_empty_file(tmp_path):
    bad = tmp_path / "empty.xplane.pb"
    bad.write_bytes(b"")
    _expect_trace_error(bad, "empty")


def test_empty_dir_and_missing_path(tmp_path):
    _expect_trace_error(tmp_path, "no .xplane.pb trace found")
    (tmp_path / "plugins" / "profile" / "run1").mkdir(parents=True)  # a run with no trace
    _expect_trace_error(tmp_path, "no .xplane.pb trace found")
    _expect_trace_error(tmp_path / "missing", "no such file or directory")
    with pytest.raises(TraceError) as ei:
        read_trace(tmp_path)  # a dir given where one file is expected
    one_line(ei.value)


# --------------------------------------------------------------------------- a real capture


def test_real_cpu_trace(tmp_path):
    import jax

    with jax.profiler.trace(str(tmp_path)):
        x = jax.device_put(np.ones((256, 256), np.float32))
        y = jax.jit(lambda a: a @ a + 1.0)(x)
        host = np.asarray(y)
    assert host.shape == (256, 256)
    assert len(list_runs(tmp_path)) == 1
    (t,) = read_traces(tmp_path)
    # devices are those that ran an HLO op (conftest simulates 4 CPU devices; we used one)
    assert "cpu:0" in t.devices and all(d.startswith("cpu:") for d in t.devices)
    # What is true of a jax 0.10 CPU trace: the runtime records no transfer event for
    # device_put or np.asarray (CPU devices share host memory); the reader says so.
    assert t.transfers == [] and t.offload_transfers == []
    assert any("CPU trace" in n for n in t.notes)
    assert t.device_op_count["cpu:0"] >= 1 and t.device_op_ns["cpu:0"] > 0
