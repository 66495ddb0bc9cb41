"""The pure parts of the audit rules, without recording anything: signature diffs, device
balance, per-step counts, JAX's incompatible-devices message."""
from __future__ import annotations

from jaxplace_cli.analysis.balance import DeviceLoad, balance_findings
from jaxplace_cli.analysis.rules.base import RuleConfig, per_step
from jaxplace_cli.analysis.rules.incompatible import _parse_args
from jaxplace_cli.analysis.rules.recompile import describe_changes, parse_leaf
from jaxplace_cli.analysis.steps import Step, StepInfo


def test_parse_leaf():
    assert parse_leaf("float32[8,128] weak @cpu:0") == {
        "kind": "array", "dtype": "float32", "shape": "8,128", "weak": True, "device": "cpu:0"}
    assert parse_leaf("numpy int32[4]")["kind"] == "numpy"
    assert parse_leaf("int 3") == {"kind": "python", "type": "int", "value": "3"}


def test_describe_changes_each_kind():
    a = ["float32[8] @cpu:0", "int 2"]
    assert describe_changes(a, ["float32[16] @cpu:0", "int 2"]) == [("shape", "arg 0: float32[8] -> float32[16]")]
    assert describe_changes(a, ["int32[8] @cpu:0", "int 2"]) == [("dtype", "arg 0: float32[8] -> int32[8]")]
    assert describe_changes(a, ["float32[8] @cpu:0", "int 3"]) == [("static argument", "arg 1: 2 -> 3")]
    assert describe_changes(a, ["float32[8] @cpu:1", "int 2"]) == [("device", "arg 0: cpu:0 -> cpu:1")]
    assert describe_changes(["float32[] weak @cpu:0"], ["float32[] @cpu:0"]) == [
        ("weak type", "arg 0: float32[] weak -> not weak")]
    # a Python float traced as a weak float32 scalar, then a float32 array: weak type
    assert describe_changes(["float 1.0"], ["float32[] @cpu:0"])[0][0] == "weak type"
    assert describe_changes(a, a[:1]) == [("argument structure", "2 -> 1 argument leaves")]
    # the same signature compiled again: the function object was re-created
    assert describe_changes(a, a) == [("nothing in the signature", "same argument signature")]
    # two things at once are both reported, in argument order
    assert [k for k, _ in describe_changes(a, ["int32[4] @cpu:1", "int 2"])] == ["shape", "dtype", "device"]


def test_balance_imbalance_and_idle():
    cfg = RuleConfig()
    loads = {"gpu:0": DeviceLoad(40, 4000), "gpu:1": DeviceLoad(10, 1000)}
    (imb, idle) = balance_findings(loads, ["gpu:0", "gpu:1", "gpu:2"], cfg, "device time")
    # 4000 >= 4.0 x 1000 and 40 >= 10 ops: unbalanced
    assert (imb.rule, imb.count, imb.time_ns, imb.devices) == ("imbalance", 40, 4000, ["gpu:0", "gpu:1"])
    assert "4.0x the least busy device gpu:1" in imb.message and "80% of the time" in imb.message
    # two devices busy, one idle: a warning
    assert (idle.rule, idle.severity, idle.count, idle.devices) == ("idle-device", "warning", 1, ["gpu:2"])
    # just under the ratio: balanced enough
    assert balance_findings({"a": DeviceLoad(40, 3999), "b": DeviceLoad(10, 1000)}, ["a", "b"], cfg, "t") == []
    # too few ops on the busiest device to call it a pattern
    assert balance_findings({"a": DeviceLoad(9, 9000), "b": DeviceLoad(1, 10)}, ["a", "b"], cfg, "t") == []
    # a one-device program on a machine with more: info, and copy-only devices are named
    (one,) = balance_findings({"a": DeviceLoad(5, 50)}, ["a", "b"], cfg, "t", copying={"b"})
    assert (one.severity, one.devices) == ("info", ["b"]) and "b only took part in transfers" in one.message
    # nothing ran at all: nothing to compare
    assert balance_findings({}, ["a", "b"], cfg, "t") == []


def test_per_step_counts_steady_state():
    steps = StepInfo("repeated jit call", "f", [Step(0, "f 0", 10, 20), Step(1, "f 1", 20, 30),
                                                Step(2, "f 2", 30, 40)])
    # seq 12 in warm-up step 0 (excluded), two in step 1, one in step 2, seq 45 after the last
    assert per_step([12, 21, 25, 31, 45], steps, [1, 2, 3, 4, 5]) == {
        "steps": 3, "method": "repeated jit call", "min": 1, "median": 1.5, "max": 2, "bytes_median": 4.5}
    assert per_step([1], StepInfo("none", "")) is None


def test_parse_incompatible_devices_message():
    msg = ("ValueError: Received incompatible devices for jitted computation. Got argument x of "
           "<lambda> with shape float32[128,128] and with device ids [0] on platform CPU and "
           "argument y of <lambda> with shape int32[] and with device ids [1] on platform CPU")
    assert _parse_args(msg) == [("x", "float32", "128x128", "cpu:0"), ("y", "int32", "scalar", "cpu:1")]
    assert _parse_args("something else") == []


def test_route_totals_past_64_bits_are_a_data_error(tmp_path):
    """Two transfers of 2**62 bytes on one route: the totals leave SQLite's 64-bit integers
    (SUM raises "integer overflow"); a hostile store is one line and exit 2, never a wrong
    total or a traceback (the route sums moved into SQL for bench P8)."""
    import subprocess
    import sys

    from jaxplace_cli.model.events import TransferEvent
    from jaxplace_cli.model.manifest import Manifest
    from jaxplace_cli.store.layout import EVENTS, write_manifest
    from jaxplace_cli.store.writer import StoreWriter

    run = tmp_path / "run"
    run.mkdir()
    w = StoreWriter(run / EVENTS)
    rows = [TransferEvent(i, i, 1, "h2d", "host", "cpu:0", 2**62, False, False, "jax.device_put", 0, 0, 0)
            for i in (1, 2)]
    w.write({"sites": [], "ops": [], "transfers": rows, "buffers": [], "markers": []})
    w.close()
    write_manifest(run, Manifest(status="complete", exit_code=0))
    r = subprocess.run([sys.executable, "-m", "jaxplace_cli", "audit", str(run), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and "integer overflow" in r.stderr


def test_a_step_numbered_0_by_the_script_is_step_0_everywhere():
    """StepTraceAnnotation(step_num=0): budgets said "step 1" for it (a 0 read as "no number")
    where device memory and the trace window say step 0."""
    from jaxplace_cli.analysis.steps import Step, StepInfo, step_number

    info = StepInfo("annotation", "train", [Step(0, "train 0", 1, 5, 0), Step(1, "train 1", 5, 9, 1)])
    assert [step_number(info, i) for i in range(2)] == [0, 1]
