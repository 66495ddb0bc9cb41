"""The fast unit tier: the audit's rules, summary and budget check on a store built from rows
written here — no JAX, no subprocess. Every run below is a small program's events written by
hand with ``StoreWriter`` and read back through ``open_run`` like a recorded run; every
expected count, byte total and message is worked out in the comments from those rows.
The end-to-end tests (tests/test_audit_rules.py) check the same rules on real JAX programs.
"""
from __future__ import annotations

import json

import pytest

from jaxplace_cli.analysis import audit_run
from jaxplace_cli.analysis.budgets import budget_from_dict, check, judge_run
from jaxplace_cli.analysis.findings import RuleConfig, run_rules
from jaxplace_cli.analysis.rules.balance import idle_device, imbalance
from jaxplace_cli.analysis.rules.fwd_bwd import fwd_bwd_split
from jaxplace_cli.analysis.rules.incompatible import incompatible_devices
from jaxplace_cli.analysis.rules.pingpong import pingpong
from jaxplace_cli.analysis.rules.recompile import recompile
from jaxplace_cli.analysis.rules.transfers import host_sync_in_loop, uncommitted_copy
from jaxplace_cli.analysis.run import open_run
from jaxplace_cli.model.events import D2D, D2H, H2D, BufferEvent, CompileInfo, Marker, OpEvent, Site, TransferEvent
from jaxplace_cli.store import StoreWriter, queries
from jaxplace_cli.store.layout import EVENTS, MANIFEST_SCHEMA_VERSION, write_manifest

FILE = "/app/train.py"
CFG = RuleConfig()  # min_bytes 1024, loop 3, uncommitted 2, recompile 2, imbalance 4.0 x / 10 ops


class Rows:
    """The events of one run, added in the order a program would record them."""

    def __init__(self, devices=("cpu:0", "cpu:1")):
        self.devices = list(devices)
        self.tables = {"sites": [], "ops": [], "transfers": [], "buffers": [], "markers": []}

    def site(self, line: int, file: str = FILE, function: str = "main") -> int:
        sid = len(self.tables["sites"]) + 1
        self.tables["sites"].append(Site(sid, file, line, function))
        return sid

    def op(self, seq, name, devices="cpu:0", kind="method", ins=(), outs=(), site=0, dur=1000,
           error="", backward=False, placed=""):
        self.tables["ops"].append(OpEvent(seq, seq * 10, dur, 1, kind, name, devices, site,
                                          ",".join(map(str, ins)), ",".join(map(str, outs)),
                                          error, backward, placed))

    def xfer(self, seq, kind, src, dst, nbytes, site=0, api="", implicit=False, blocking=False,
             buf=0, op_seq=0):
        self.tables["transfers"].append(TransferEvent(seq, seq * 10, 1, kind, src, dst, nbytes,
                                                      implicit, blocking, api, site, buf, op_seq))

    def buf(self, buf, seq, device, shape="4", dtype="float32", nbytes=16, committed=True, site=0):
        self.tables["buffers"].append(BufferEvent(buf, seq, device, shape, dtype, nbytes, committed, site))

    def marker(self, seq, kind, value):
        self.tables["markers"].append(Marker(seq, seq * 10, kind, value))

    def compile(self, seq, fun, op_seq, site, signature, secs=0.25):
        self.marker(seq, "compile", json.dumps({"fun": fun, "secs": secs, "op": fun, "op_seq": op_seq,
                                                "site": site, "signature": signature}))

    def open(self, path, **manifest):
        path.mkdir()
        writer = StoreWriter(path / EVENTS)
        writer.write(self.tables)
        writer.close()
        write_manifest(path, {"schema_version": MANIFEST_SCHEMA_VERSION, "status": "complete",
                              "argv": ["train.py"], "cwd": "/app",
                              "devices": [{"name": d} for d in self.devices], **manifest})
        return open_run(path)


def _one(findings, rule):
    (f,) = [f for f in findings if f.rule == rule]
    return f


# -- summary -----------------------------------------------------------------------------------

def test_summary_totals_sites_ops_and_routes(tmp_path):
    r = Rows()
    up, back, move = r.site(10), r.site(20), r.site(30)
    r.op(1, "add", outs=[1], site=up, dur=100)
    r.xfer(2, H2D, "host", "cpu:0", 4096, up, "jit(f) argument", implicit=True, op_seq=3)
    r.op(3, "add", outs=[2], site=up, dur=200)
    r.xfer(4, H2D, "host", "cpu:0", 4096, up, "jit(f) argument", implicit=True, op_seq=5)
    r.op(5, "multiply", outs=[3], site=up, dur=300)
    r.xfer(6, H2D, "host", "cpu:0", 8, up, "jit(f) argument", implicit=True)  # a scalar: small
    r.xfer(7, D2H, "cpu:0", "host", 4, back, "float()", blocking=True)  # small, still blocking
    r.xfer(8, D2H, "cpu:0", "host", -1, back, "float()")  # size unknown
    r.xfer(9, D2D, "cpu:0", "cpu:1", 2048, move, "jax.device_put", op_seq=10)
    r.op(10, "device_put", "cpu:1", "device_put", ins=[3], outs=[4], site=move, dur=400)
    r.op(11, "add", "cpu:1", outs=[5], site=move, dur=500)
    r.op(12, "add", error="TypeError: boom", site=move)
    s = audit_run(r.open(tmp_path / "run"), CFG).summary

    # counted (>= 1 KiB): h2d 2 x 4096, d2d 1 x 2048; small: h2d 8 B, d2h 4 B; unknown: 1 d2h
    assert {k: (t.count, t.bytes) for k, t in s.totals.items()} == {"h2d": (2, 8192), "d2h": (0, 0), "d2d": (1, 2048)}
    assert {k: (t.count, t.bytes) for k, t in s.small.items()} == {"h2d": (1, 8), "d2h": (1, 4), "d2d": (0, 0)}
    assert s.unknown_size == {"h2d": 0, "d2h": 1, "d2d": 0}
    # sites of counted transfers, most bytes first; the scalar is below min_bytes
    assert [(t.kind, t.line, t.api, t.implicit, t.blocking, t.count, t.bytes, t.routes) for t in s.sites] == [
        ("h2d", 10, "jit(f) argument", True, False, 2, 8192, ["host>cpu:0"]),
        ("d2d", 30, "jax.device_put", False, False, 1, 2048, ["cpu:0>cpu:1"])]
    # 5 successful ops: cpu:0 add x2, multiply (600 ns); cpu:1 device_put, add (900 ns); 1 failed
    assert [(d.device, d.count, d.dispatch_ns, d.top) for d in s.ops_by_device] == [
        ("cpu:0", 3, 600, [("add", 2), ("multiply", 1)]),
        ("cpu:1", 2, 900, [("add", 1), ("device_put", 1)])]
    assert (s.ops_total, s.op_errors, s.devices) == (5, 1, ["cpu:0", "cpu:1"])
    assert [(x.kind, x.src, x.dst, x.count, x.bytes, x.small_count, x.small_bytes, x.unknown_size, x.blocking)
            for x in s.routes] == [("h2d", "host", "cpu:0", 2, 8192, 1, 8, 0, 0),
                                   ("d2h", "cpu:0", "host", 0, 0, 1, 4, 1, 1),
                                   ("d2d", "cpu:0", "cpu:1", 1, 2048, 0, 0, 0, 0)]
    # 2 implicit uploads at one line are under the loop threshold (3): a clean program
    assert s.min_bytes == 1024 and run_rules(open_run(tmp_path / "run"), CFG) == []


# -- transfers along the data flow ---------------------------------------------------------------

def test_pingpong_follows_the_data_and_ignores_a_one_way_move(tmp_path):
    r = Rows()
    there, back, once = r.site(11), r.site(12), r.site(13)
    r.op(1, "tanh", outs=[1], site=there)  # buf 1 on cpu:0
    r.xfer(2, D2D, "cpu:0", "cpu:1", 4096, there, "jax.device_put", buf=2, op_seq=3)
    r.op(3, "device_put", "cpu:1", "device_put", ins=[1], outs=[2], site=there)  # history cpu:0, cpu:1
    r.op(4, "sin", "cpu:1", ins=[2], outs=[3], site=back)  # buf 3 inherits it
    r.xfer(5, D2D, "cpu:1", "cpu:0", 4096, back, "jax.device_put", buf=4, op_seq=6)
    r.op(6, "device_put", "cpu:0", "device_put", ins=[3], outs=[4], site=back)  # back to cpu:0: return 1
    r.op(7, "cos", ins=[4], outs=[5], site=back)
    r.xfer(8, D2D, "cpu:0", "cpu:1", 4096, there, "jax.device_put", buf=6, op_seq=9)
    r.op(9, "device_put", "cpu:1", "device_put", ins=[5], outs=[6], site=there)  # cpu:1 again: return 2
    # an unrelated array moved once, cpu:1 -> cpu:0: a chain without a return
    r.op(10, "exp", "cpu:1", outs=[7], site=once)
    r.xfer(11, D2D, "cpu:1", "cpu:0", 65536, once, "jax.device_put", buf=8, op_seq=12)
    r.op(12, "device_put", "cpu:0", "device_put", ins=[7], outs=[8], site=once)
    run = r.open(tmp_path / "run")

    (f,) = pingpong(run, CFG)
    # legs: cpu:0->cpu:1 at line 11 x2 (the second a return), cpu:1->cpu:0 at line 12 x1 (a return);
    # both legs returned once, line 11 more often in all: the finding points there
    assert (f.rule, f.severity, f.line, f.count, f.bytes, f.devices) == ("pingpong", "error", 11, 2, 8192, ["cpu:0", "cpu:1"])
    assert f.message == ("data bounced between cpu:0 and cpu:1: 2 returns to a device it had left (8.0 KiB "
                         "moved back) along the data flow of 1 array, in 3 transfers (12.0 KiB); legs: cpu:0->cpu:1 at train.py:11 x2, "
                         "cpu:1->cpu:0 at train.py:12 x1")
    assert [x["role"] for x in f.related] == ["leg cpu:0->cpu:1: 2 transfers, 8.0 KiB",
                                              "leg cpu:1->cpu:0: 1 transfer, 4.0 KiB"]
    # the budget counts the returns
    (b,) = check(audit_run(run, CFG), run, budget_from_dict({"pingpong": 1}, "t"), 1024)
    assert (b.rule, b.limit, b.actual, b.line) == ("pingpong", 1, 2, 11)
    assert b.message == "ping-pong returns were limited to 1 but the run had 2 (train.py:11)"
    assert check(audit_run(run, CFG), run, budget_from_dict({"pingpong": 2}, "t"), 1024) == []


def test_pingpong_legs_are_the_parameters_when_other_moved_data_joins_them(tmp_path):
    # an eager jax.vjp on cpu:1 with parameters w put over from cpu:0 (line 10) and the gradient
    # put back (line 13), 4 times; x was put over once before (line 4), and each backward op
    # copies a new uncommitted cotangent over (line 12). By hand: w's journey is 8 moves,
    # 4 x 64 KiB each way, 7 of them returns; x's put and the cotangent copies join it on
    # cpu:1 with as long a history, and took it over before (their legs were listed, w's first not)
    r = Rows()
    put, copy, back, xput = r.site(10), r.site(12), r.site(13), r.site(4)
    r.op(1, "ones", outs=[1], site=xput)
    r.xfer(2, D2D, "cpu:0", "cpu:1", 16384, xput, "jax.device_put", buf=2, op_seq=3)
    r.op(3, "device_put", "cpu:1", "device_put", ins=[1], outs=[2], site=xput)  # x on cpu:1
    r.op(4, "ones", outs=[3], site=put)  # w on cpu:0
    seq, w, buf = 10, 3, 100
    for _ in range(4):
        r.xfer(seq, D2D, "cpu:0", "cpu:1", 65536, put, "jax.device_put", buf=buf, op_seq=seq + 1)
        r.op(seq + 1, "device_put", "cpu:1", "device_put", ins=[w], outs=[buf], site=put)
        r.op(seq + 2, "tanh", "cpu:1", ins=[2, buf], outs=[buf + 1], site=copy)  # forward, x and w1
        r.op(seq + 3, "zeros", "cpu:0", outs=[buf + 2], site=copy)  # the cotangent, uncommitted
        r.xfer(seq + 4, D2D, "cpu:0", "cpu:1", 16384, copy, "mul (uncommitted input)", implicit=True,
               buf=buf + 2, op_seq=seq + 5)
        r.op(seq + 5, "mul", "cpu:1", ins=[buf + 2, buf + 1], outs=[buf + 3], site=copy)  # g
        r.xfer(seq + 6, D2D, "cpu:1", "cpu:0", 65536, back, "jax.device_put", buf=buf + 4, op_seq=seq + 7)
        r.op(seq + 7, "device_put", "cpu:0", "device_put", ins=[buf + 3], outs=[buf + 4], site=back)
        r.op(seq + 8, "sub", "cpu:0", ins=[w, buf + 4], outs=[buf + 5], site=back)
        seq, w, buf = seq + 10, buf + 5, buf + 10
    (f,) = pingpong(r.open(tmp_path / "run"), CFG)
    assert (f.count, f.bytes) == (7, 7 * 65536)
    assert f.message.endswith("in 8 transfers (512.0 KiB); legs: cpu:0->cpu:1 at train.py:10 x4, "
                              "cpu:1->cpu:0 at train.py:13 x4")


def test_uncommitted_copy_counts_copies_of_one_array(tmp_path):
    r = Rows()
    made, use, other = r.site(5), r.site(9), r.site(40)
    r.op(1, "ones", kind="jnp", outs=[1], site=made)
    r.buf(1, 1, "cpu:0", "128x128", "float32", 65536, committed=False, site=made)
    r.buf(2, 2, "cpu:1", "128x128", "float32", 65536, committed=True, site=made)
    for k in range(3):  # jit(step) on cpu:1 copies the uncommitted buf 1 each call
        seq = 10 + 2 * k
        r.xfer(seq, D2D, "cpu:0", "cpu:1", 65536, use, "jit(step) (uncommitted input)", implicit=True, buf=1, op_seq=seq + 1)
        r.op(seq + 1, "step", "cpu:1", "jit", ins=[1, 2], outs=[3 + k], site=use)
    # another uncommitted array copied once: under the threshold (2)
    r.buf(9, 30, "cpu:0", "8", "float32", 32768, committed=False, site=other)
    r.xfer(31, D2D, "cpu:0", "cpu:1", 32768, other, "jit(g) (uncommitted input)", implicit=True, buf=9, op_seq=32)
    r.op(32, "g", "cpu:1", "jit", ins=[9], outs=[20], site=other)
    (f,) = uncommitted_copy(r.open(tmp_path / "run"), CFG)
    # 3 copies x 64 KiB = 192 KiB, at line 9, of the array created at line 5
    assert (f.rule, f.line, f.count, f.bytes, f.devices) == ("uncommitted-copy", 9, 3, 196608, ["cpu:0", "cpu:1"])
    # "step" called 3 times is the step (no annotations): calls at seqs 11, 13, 15, the last cut
    # to the median span (2), so steps [11,13) [13,15) [15,17). The copies (seqs 10, 12, 14)
    # precede their calls: none, 1, 1 ... per step 1, 1, 0; steady state (after warm-up) 1, 0
    assert f.per_step == {"steps": 3, "method": "repeated jit call", "min": 0, "median": 0.5, "max": 1}
    assert f.message.startswith("the uncommitted 128x128 float32 array created at train.py:5 was copied "
                                "from cpu:0 to cpu:1 again and again: 3 copies (0-1 per step (median 0.5) "
                                "over 3 steps) (192.0 KiB) at train.py:9;")


def test_uncommitted_copy_of_a_new_array_each_step(tmp_path):
    # a batch made on the default device (cpu:0, uncommitted) at line 5 every step and passed to a
    # step committed to cpu:1 at line 9: each array is copied once, 4 arrays, 4 copies of 64 KiB
    r = Rows()
    made, use = r.site(5), r.site(9)
    for k in range(4):
        seq = 10 * (k + 1)
        r.op(seq, "random.normal", kind="jnp", outs=[100 + k], site=made)
        r.buf(100 + k, seq, "cpu:0", "128x128", "float32", 65536, committed=False, site=made)
        r.xfer(seq + 1, D2D, "cpu:0", "cpu:1", 65536, use, "jit(step) (uncommitted input)", implicit=True,
               buf=100 + k, op_seq=seq + 2)
        r.op(seq + 2, "step", "cpu:1", "jit", ins=[100 + k], outs=[200 + k], site=use)
    (f,) = uncommitted_copy(r.open(tmp_path / "run"), CFG)
    assert (f.rule, f.severity, f.line, f.count, f.bytes) == ("uncommitted-copy", "warning", 9, 4, 4 * 65536)
    assert f.message.startswith("4 uncommitted 128x128 float32 arrays created at train.py:5 (a new one each time) "
                                "were each made on cpu:0 and copied to cpu:1: 4 copies")
    assert f.fix.startswith("make them on cpu:1")
    # two such arrays (under loop_threshold, 3): a line that did not repeat, no finding
    r2 = Rows()
    made, use = r2.site(5), r2.site(9)
    for k in range(2):
        r2.buf(100 + k, 10 * k + 1, "cpu:0", "128x128", "float32", 65536, committed=False, site=made)
        r2.xfer(10 * k + 2, D2D, "cpu:0", "cpu:1", 65536, use, "jit(step) (uncommitted input)", implicit=True,
                buf=100 + k, op_seq=10 * k + 3)
    assert uncommitted_copy(r2.open(tmp_path / "run2"), CFG) == []


def test_fwd_bwd_split_counts_residuals_read_across_devices(tmp_path):
    r = Rows()
    put, fwd, cot, bwd, move = r.site(3), r.site(4), r.site(6), r.site(7), r.site(8)
    r.op(1, "device_put", "cpu:0", "device_put", ins=[0], outs=[1], site=put)  # host data: not forward work
    r.op(2, "sin", "cpu:0", "prim", ins=[1], outs=[2], site=fwd)  # forward on cpu:0: bufs 1, 2 live there
    r.op(3, "ones", "cpu:1", "jnp", outs=[3], site=cot)  # a cotangent made from nothing, on cpu:1
    r.xfer(4, D2D, "cpu:0", "cpu:1", 4096, move, "mul (moved by policy)", implicit=True, buf=2, op_seq=5)
    r.op(5, "mul", "cpu:1", "prim", ins=[2, 3], outs=[4], site=bwd, backward=True)  # reads residual 2
    r.op(6, "cos", "cpu:0", "prim", ins=[1], outs=[5], site=fwd)  # forward again ...
    r.op(7, "mul", "cpu:0", "prim", ins=[5, 4], outs=[6], site=bwd, backward=True)  # ... backward where it ran
    run = r.open(tmp_path / "run")
    (f,) = fwd_bwd_split(run, CFG)
    # one crossing: residual 2 (forward on cpu:0) read by the backward op at line 7 on cpu:1,
    # carried by one 4 KiB copy. Op 7 runs on cpu:0 and reads 5 (forward on cpu:0) and 4, a
    # backward output: neither crosses. Passes: 5 is the first backward op, 7 the second pass.
    assert (f.rule, f.severity, f.line, f.count, f.bytes, f.devices) == (
        "fwd-bwd-split", "warning", 7, 1, 4096, ["cpu:0", "cpu:1"])
    assert f.message == ("the backward pass at train.py:7 ran on cpu:1 but its forward ran on cpu:0: 1 backward "
                         "op in 1 backward pass read 1 forward array (residuals) from cpu:0, 1 transfer (4.0 KiB)")
    assert [(x["line"], x["role"]) for x in f.related] == [
        (4, "forward ran on cpu:0 here"), (8, "forward data moved cpu:0->cpu:1 here (1 transfer)")]
    # below min_bytes: no finding
    assert fwd_bwd_split(run, RuleConfig(min_bytes=4097)) == []


# -- devices -------------------------------------------------------------------------------------

def test_imbalance_and_idle_device_weigh_ops_by_typical_time(tmp_path):
    r = Rows(devices=("cpu:0", "cpu:1", "cpu:2", "cpu:3"))
    busy, light = r.site(20), r.site(21)
    seq = 0
    for k in range(10):  # 10 calls of "f" on cpu:0, the first 6 compiling (100 us each)
        seq += 1
        r.op(seq, "f", "cpu:0", outs=[seq], site=busy, dur=100_000 if k < 6 else 1000)
        if k < 6:
            r.compile(seq + 1000, "f", seq, busy, ["float32[8] @cpu:0"])
    for _ in range(2):  # 2 calls on cpu:1
        seq += 1
        r.op(seq, "f", "cpu:1", outs=[seq], site=light, dur=1000)
    r.op(seq + 1, "iota", "cpu:0", outs=[99], site=busy)  # ran on one device only: not shared work
    r.xfer(seq + 2, D2D, "cpu:0", "cpu:2", 16, light, "jax.device_put", buf=98)  # cpu:2 only copies
    run = r.open(tmp_path / "run")  # (damaged compile markers: test_compiles_reads_...)

    (f,) = imbalance(run, CFG)
    # "f" ran on both devices. Typical time: the median of the calls that did not compile
    # (4 on cpu:0 and 2 on cpu:1, all 1 us) = 1 us, so cpu:0 10 ops / 10 us, cpu:1 2 ops / 2 us:
    # 5.0x, 10 >= 10 ops; 10/12 = 83% of the time. (The compiles would make it 50.5 us a call.)
    assert (f.rule, f.line, f.count, f.time_ns, f.devices) == ("imbalance", 20, 10, 10_000, ["cpu:0", "cpu:1"])
    assert f.message.startswith("cpu:0 ran 10 ops (10.0 µs, 83% of the time), 5.0x the least busy device "
                                "cpu:1 (2 ops, 2.0 µs); per device: cpu:0 10 ops / 10.0 µs, cpu:1 2 ops / 2.0 µs;")
    (idle,) = idle_device(run, CFG)
    # cpu:0 ran 11 ops (with iota), cpu:1 2: two devices busy, so idle ones are a warning
    assert (idle.rule, idle.severity, idle.count, idle.devices) == ("idle-device", "warning", 2, ["cpu:2", "cpu:3"])
    assert idle.message == ("2 of 4 devices ran no ops (cpu:2, cpu:3) while cpu:0, cpu:1 ran 13 ops; "
                            "cpu:2 only took part in transfers")


def test_incompatible_devices_says_where_each_argument_was_committed(tmp_path):
    r = Rows()
    put_x, make_y, put_y, call = r.site(2), r.site(3), r.site(4), r.site(6)
    r.op(1, "device_put", "cpu:0", "device_put", ins=[0], outs=[1], site=put_x)
    r.buf(1, 1, "cpu:0", "4", "float32", 16, committed=True, site=put_x)
    r.op(2, "ones", "cpu:0", "jnp", outs=[2], site=make_y)
    r.buf(2, 2, "cpu:0", "4", "float32", 16, committed=False, site=make_y)
    r.op(3, "device_put", "cpu:1", "device_put", ins=[2], outs=[3], site=put_y)
    r.buf(3, 3, "cpu:1", "4", "float32", 16, committed=True, site=put_y)
    r.op(4, "f", "cpu:0", "jit", ins=[1, 3], site=call, error=(
        "ValueError: Received incompatible devices for jitted computation. Got argument x of f with "
        "shape float32[4] and with device ids [0] on platform CPU and argument y of f with shape "
        "float32[4] and with device ids [1] on platform CPU"))
    r.op(5, "g", "cpu:0", "jit", ins=[1], site=call, error="TypeError: something else")
    (f,) = incompatible_devices(r.open(tmp_path / "run"), CFG)
    assert (f.rule, f.severity, f.line, f.count, f.devices) == ("incompatible-devices", "error", 6, 1, ["cpu:0", "cpu:1"])
    assert f.message == (
        "f at train.py:6 failed: its arguments are committed to different devices, and JAX will not "
        "choose one for you. argument x (float32[4]) is on cpu:0: put there from host data and committed "
        "by jax.device_put at train.py:2; argument y (float32[4]) is on cpu:1: created at train.py:3 by "
        "jnp.ones, committed to cpu:1 at train.py:4 by jax.device_put")
    assert [x["line"] for x in f.related] == [2, 3, 4]


# -- compiles ------------------------------------------------------------------------------------

def test_recompile_names_what_changed(tmp_path):
    r = Rows()
    call = r.site(15)
    for k, n in enumerate([8, 16, 16, 32]):  # 4 calls; the 3rd reuses the 2nd's shape
        seq = 10 * (k + 1)
        r.op(seq, "step", "cpu:0", "jit", outs=[seq], site=call)
        if k != 2:
            r.compile(seq + 1, "step", seq, call, [f"float32[{n}] @cpu:0", "int 2"])
    r.compile(50, "other", 10, call, [])  # another function compiled during the call: not "step"
    run = r.open(tmp_path / "run")
    (f,) = recompile(run, CFG)
    # 3 compiles > threshold 2, 0.25 s each; two changes of arg 0's shape
    assert (f.rule, f.line, f.count, f.time_ns) == ("recompile", 15, 3, 750_000_000)
    assert f.message == ("step was compiled 3 times (0.75 s compiling); what changed between consecutive "
                         "compiles: shape x2 (arg 0: float32[8] -> float32[16]; arg 0: float32[16] -> float32[32])")
    assert recompile(run, RuleConfig(recompile_threshold=3)) == []
    # a budget counts compiles beyond the first: 2
    (b,) = check(audit_run(run, CFG), run, budget_from_dict({"recompiles": 1}, "t"), 1024)
    assert (b.rule, b.limit, b.actual) == ("recompiles", 1, 2)
    assert b.message == "recompiles were limited to 1 but the run had 2 (step compiled 3 times at train.py:15)"


def test_recompile_counts_compiles_not_leaves(tmp_path):
    # 4 compiles, 3 changes: float32 -> bfloat16 of both leaves (one change of dtype touching
    # two leaves), then a third leaf (structure), then bfloat16 -> float16 of both
    r = Rows()
    call = r.site(15)
    sigs = [["float32[8] @cpu:0"] * 2, ["bfloat16[8] @cpu:0"] * 2, ["bfloat16[8] @cpu:0"] * 3,
            ["float16[8] @cpu:0"] * 3]
    for k, sig in enumerate(sigs):
        r.op(10 * (k + 1), "step", "cpu:0", "jit", site=call)
        r.compile(10 * (k + 1) + 1, "step", 10 * (k + 1), call, sig)
    (f,) = recompile(r.open(tmp_path / "run"), CFG)
    assert "what changed between consecutive compiles: dtype x2, argument structure x1 (" in f.message


def test_compiles_reads_every_well_formed_marker_and_refuses_damaged_ones(tmp_path):
    from jaxplace_cli.model.errors import DataError

    r = Rows()
    r.compile(1, "f", 7, 3, ["float32[8]"])
    r.marker(2, "compile", json.dumps({"fun": "jit_g", "secs": 1}))  # outside any op: defaults
    bad = ["", "{not json", "[1, 2]", "null", '{"fun": 3}', '{"secs": "1.5"}', '{"secs": true}',
           '{"secs": -1}', '{"secs": NaN}', '{"secs": Infinity}', '{"secs": 1e999}', '{"op_seq": 1.5}',
           '{"op_seq": "7"}', '{"site": null}', '{"signature": "f32"}', '{"signature": [1]}',
           '{"secs": 1' + "0" * 400 + "}", "[" * 100_000 + "]" * 100_000]
    r.marker(1000, "step-begin", json.dumps({"fun": "f"}))  # another kind
    got = queries.compiles(r.open(tmp_path / "run").store)
    assert got == [CompileInfo(1, "f", 0.25, "f", 7, 3, ("float32[8]",)),
                   CompileInfo(2, "jit_g", 1.0, "", 0, 0, ())]
    assert all(queries.decode_compile(0, v) is None for v in bad)
    r.marker(10, "compile", bad[2])  # one damaged marker: the store was altered, exit 2
    with pytest.raises(DataError, match="seq 10"):
        queries.compiles(r.open(tmp_path / "run2").store)


# -- host syncs and budgets ------------------------------------------------------------------------

def _training_loop(tmp_path):
    """4 annotated steps; each uploads a 4 KiB numpy batch into jit(step) and reads float(loss)
    (4 bytes) once. After the loop one jax.device_get of a 2-leaf pytree (512 B each)."""
    r = Rows(devices=("cpu:0",))
    batch, loss, get = r.site(10), r.site(20), r.site(30)
    for i in range(4):
        base = 100 * (i + 1)
        r.marker(base, "step-begin", f"train\t{i}")
        r.xfer(base + 1, H2D, "host", "cpu:0", 4096, batch, "jit(step) argument", implicit=True, op_seq=base + 2)
        r.op(base + 2, "step", "cpu:0", "jit", outs=[base], site=batch)
        r.xfer(base + 3, D2H, "cpu:0", "host", 4, loss, "float()", blocking=True)
        r.marker(base + 9, "step-end", "")
    r.op(600, "device_get", "cpu:0", "device_get", ins=[400, 401], site=get)
    for k in range(2):
        r.xfer(601 + k, D2H, "cpu:0", "host", 512, get, "jax.device_get", blocking=True, op_seq=600)
    return r.open(tmp_path / "run")


def test_host_sync_in_loop_counts_calls_per_step(tmp_path):
    run = _training_loop(tmp_path)
    (f,) = host_sync_in_loop(run, CFG)
    # float() 4 times, once per step (steady state: steps 1-3); the device_get waited once
    assert (f.rule, f.line, f.count, f.bytes) == ("host-sync-in-loop", 20, 4, 16)
    assert f.per_step == {"steps": 4, "method": "StepTraceAnnotation", "min": 1, "median": 1, "max": 1}
    assert f.message == "float() at train.py:20 made the host wait for the device 4 times (1 per step over 4 steps); 16 B read"
    assert host_sync_in_loop(run, RuleConfig(loop_threshold=5)) == []


def test_budget_check_counts_limits_in_order(tmp_path):
    run = _training_loop(tmp_path)
    budget = budget_from_dict({"h2d": {"bytes": "8KiB"}, "d2h": {"count": 2, "count_per_step": 0},
                               "host_syncs_per_step": 0, "fail_on": "warning"}, "budget.toml")
    result = judge_run(run, budget)
    got = [(b.rule, b.limit, b.actual, b.line) for b in result.budget.breaches]
    assert got == [
        ("h2d.bytes", 8192, 16384, 10),  # 4 uploads x 4 KiB
        # d2h counts every read (a budget without min_bytes): 4 floats + 2 leaves; by bytes the
        # device_get (1 KiB) outweighs the floats (16 B)
        ("d2h.count", 2, 6, 30),
        ("d2h.count_per_step", 0, 1, 20),  # the first worst steady step: step 1
        ("host_syncs_per_step", 0, 1, 20),
        # the findings: implicit uploads (16 KiB) before the host syncs (16 B)
        ("fail_on.implicit-h2d-in-loop", 0, 1, 10),
        ("fail_on.host-sync-in-loop", 0, 1, 20)]
    assert [b.message for b in result.budget.breaches[:4]] == [
        "h2d bytes were limited to 8.0 KiB but the run moved 16.0 KiB (train.py:10 jit(step) argument)",
        "d2h transfers were limited to 2 but the run did 6 (train.py:30 jax.device_get)",
        "d2h per step was limited to 0 but step 1 did 1 (train.py:20 float())",
        "host syncs per step were limited to 0 but step 1 did 1 (train.py:20 float())"]
    assert result.budget.limits == ["h2d.bytes", "d2h.count", "d2h.count_per_step", "host_syncs_per_step",
                                    "fail_on.warning"]
    # the float() line allowed: its reads and its finding no longer count
    allowed = budget_from_dict({"d2h": {"count": 2, "count_per_step": 0}, "host_syncs_per_step": 0,
                                "fail_on": "warning", "allow": ["*/train.py:20"]}, "budget.toml")
    assert [b.rule for b in check(result, run, allowed, 1024)] == ["fail_on.implicit-h2d-in-loop"]


@pytest.mark.parametrize("limit", ["d2h.count_per_step", "host_syncs_per_step"])
def test_budget_per_step_limit_without_steps_is_a_breach(tmp_path, limit):
    r = Rows(devices=("cpu:0",))
    r.xfer(1, D2H, "cpu:0", "host", 4, r.site(1), "float()", blocking=True)
    run = r.open(tmp_path / "run")
    kind, _, key = limit.partition(".")
    budget = budget_from_dict({kind: {key: 0}} if key else {limit: 0}, "t")
    (b,) = check(audit_run(run, CFG), run, budget, 1024)
    subject = "d2h per step was" if key else "host syncs per step were"
    assert (b.rule, b.actual) == (limit, -1)
    assert b.message == (f"{subject} limited but no steps were detected (no StepTraceAnnotation and no jit "
                         "function called 3 or more times); mark steps with jax.profiler.StepTraceAnnotation "
                         "or drop the per-step limit")
