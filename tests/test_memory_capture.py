"""Device memory (issue 27): ground truths computed by hand, recorded in-process on the 4
simulated CPU devices, stored and analysed as ``jaxplace audit`` does (analysis/memory.py).

Each block names its lines with a ``# L-x`` tag; the expected numbers are written out in
bytes beside the code that makes them (float32: 4 bytes an element)."""
import gc
import re
import runpy
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxplace_cli.analysis.memory import as_dict, memory_report
from jaxplace_cli.capture.recorder import Recorder
from jaxplace_cli.capture.recording import Recording
from jaxplace_cli.store.reader import StoreReader
from jaxplace_cli.store.writer import StoreWriter

HERE = Path(__file__)
EXAMPLE = HERE.parent / "scripts" / "memory" / "example.py"
MiB = 1 << 20


def line(tag: str, path: Path = HERE) -> int:
    """The line of this file (or ``path``) that carries ``# tag``."""
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1)
            if re.search(rf"# {tag}(:|$)", text.rstrip())]
    assert len(hits) == 1, tag
    return hits[0]


@contextmanager
def recorded_memory(tmp_path):
    """Record the block, write its rows to a store, hand back the rows and the memory report."""
    rec = Recorder()
    recording = Recording(rec, "all")
    out = SimpleNamespace()
    recording.start()
    try:
        yield out
    finally:
        recording.stop()
        out.rows = rec.drain()
        writer = StoreWriter(tmp_path / "events.sqlite")
        writer.write(out.rows)
        writer.close()
        out.store = StoreReader(tmp_path / "events.sqlite")
        out.report = memory_report(SimpleNamespace(store=out.store))
        out.doc = as_dict(out.report)
        out.device = {d["device"]: d for d in out.doc["devices"]}


def holders(dev: dict) -> list[tuple[int, int, int]]:
    """(line, bytes, arrays) of a device's holders at its peak."""
    return [(h["line"], h["bytes"], h["arrays"]) for h in dev["at_peak"]]


def test_the_issue_example(tmp_path, jax_devices):
    """cpu:0 peaks at 2 MiB (P and Q), cpu:1 at 5 MiB (R and S); at exit 1 MiB each. The
    ``jnp.ones`` that P's line makes first is the same device buffer as P (device_put onto its
    own device aliases it): one allocation, not two."""
    with recorded_memory(tmp_path) as m:
        script = runpy.run_path(str(EXAMPLE))  # its globals kept: what is live "at exit"
    p, q, r, s = 8, 9, 11, 12
    assert m.doc["source"] == "tracked"
    assert sorted(m.device) == ["cpu:0", "cpu:1"]
    d0, d1 = m.device["cpu:0"], m.device["cpu:1"]
    assert (d0["peak_bytes"], d0["end_bytes"]) == (2 * MiB, MiB)
    assert holders(d0) == [(p, MiB, 1), (q, MiB, 1)]
    assert (d1["peak_bytes"], d1["end_bytes"]) == (5 * MiB, MiB)
    assert holders(d1) == [(s, 4 * MiB, 1), (r, MiB, 1)]
    assert all(h["file"] == str(EXAMPLE) for d in (d0, d1) for h in d["at_peak"])
    assert d0["peak_step"] is None and m.doc["failed_allocations"] == []
    del script
    # the peak is the moment Q's op was dispatched: its buffer row's seq
    q_seq = next(b.seq for b in m.rows["buffers"] if b.bytes == MiB and b.device == "cpu:0" and b.committed
                 and b.site == next(s_.id for s_ in m.rows["sites"] if s_.line == q))
    assert d0["peak_seq"] == q_seq


def test_delete_frees_once(tmp_path, jax_devices):
    d0 = jax_devices[0]
    with recorded_memory(tmp_path) as m:
        x = jnp.zeros((1024, 256), device=d0)  # L-x: 1 MiB
        y = jnp.ones((2048, 256), device=d0)  # L-y: 2 MiB
        x.delete()
        z = jnp.ones((512, 256), device=d0)  # L-z: 512 KiB
        del x  # already deleted: no second free
    d = m.device["cpu:0"]
    assert d["peak_bytes"] == 3 * MiB and holders(d) == [(line("L-y"), 2 * MiB, 1), (line("L-x"), MiB, 1)]
    assert d["end_bytes"] == 2 * MiB + MiB // 2
    hows = sorted(f.how for f in m.store.frees())
    assert hows == ["delete"], hows
    del y, z


def test_donation_frees_the_argument_at_the_call(tmp_path, jax_devices):
    """A donated argument is freed by the call that consumes it, before its results count: the
    peak is one buffer, not two."""
    d0 = jax_devices[0]
    with recorded_memory(tmp_path) as m:
        double = jax.jit(lambda a: a * 2, donate_argnums=0)  # made under the hooks: a recorded jit
        x = jnp.zeros((1024, 256), device=d0)  # L-donated: 1 MiB
        y = double(x)  # L-donating: 1 MiB, x given up
        assert x.is_deleted()
    d = m.device["cpu:0"]
    assert (d["peak_bytes"], d["end_bytes"]) == (MiB, MiB)
    assert [f.how for f in m.store.frees()] == ["donated"]
    del x, y


def test_sharded_array_counts_each_shard_on_its_device(tmp_path, jax_devices):
    mesh = Mesh(jax_devices, ("a",))
    with recorded_memory(tmp_path) as m:
        host = jnp.ones((1024, 256))  # L-host: 1 MiB on cpu:0, freed below
        x = jax.device_put(host, NamedSharding(mesh, PartitionSpec("a")))  # L-split: 256 KiB a device
        del host
        rep = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, PartitionSpec()))  # L-rep: 512 KiB each
    quarter, half = MiB // 4, MiB // 2
    for dev in ("cpu:1", "cpu:2", "cpu:3"):
        d = m.device[dev]
        assert (d["peak_bytes"], d["end_bytes"]) == (quarter + half, quarter + half)
        assert holders(d) == [(line("L-rep"), half, 1), (line("L-split"), quarter, 1)]
    assert m.device["cpu:0"]["end_bytes"] == quarter + half
    assert sorted((s.device, s.bytes) for s in m.store.shards() if s.bytes == quarter) == [
        (f"cpu:{i}", quarter) for i in range(4)]
    # replicated: 3 copies past the first of 512 KiB
    assert [(r[2], r[3]) for r in m.report.replicated] == [([f"cpu:{i}" for i in range(4)], half)]
    del x, rep


def test_jit_outputs_are_allocations_of_the_call(tmp_path, jax_devices):
    d1 = jax_devices[1]
    with recorded_memory(tmp_path) as m:
        both = jax.jit(lambda a: (a * 2, a.sum()))
        x = jnp.ones((1024, 256), device=d1)  # L-jx: 1 MiB
        y, total = both(x)  # L-jit: 1 MiB + a 4-byte scalar
    d = m.device["cpu:1"]
    assert (d["peak_bytes"], d["end_bytes"]) == (2 * MiB + 4, 2 * MiB + 4)
    assert holders(d) == [(line("L-jit"), MiB + 4, 2), (line("L-jx"), MiB, 1)]
    del x, y, total


def test_out_of_memory_is_recorded_reported_and_raised_unchanged(tmp_path, jax_devices, capfd):
    d0 = jax_devices[0]
    with jax.default_device(d0):
        try:
            jnp.zeros((1 << 40,), jnp.float32)
        except Exception as exc:
            plain = (type(exc), str(exc))
    keep = None
    with recorded_memory(tmp_path) as m:
        keep = jnp.ones((1024, 256), device=d0)  # L-keep: 1 MiB live at the failure
        capfd.readouterr()
        with pytest.raises(Exception) as info:
            jnp.zeros((1 << 40,), jnp.float32)  # L-oom: 4 TiB
    assert (type(info.value), str(info.value)) == plain
    assert "RESOURCE_EXHAUSTED" in plain[1]
    err = capfd.readouterr().err
    assert f"jaxplace: out of memory at {HERE}:{line('L-oom')} on cpu:0: requested 4.0 TiB" in err
    assert "live jax.Arrays per device: cpu:0 1.0 MiB" in err
    assert f"1.0 MiB  cpu:0    {HERE}:{line('L-keep')}  float32[1024,256]" in err
    assert m.doc["failed_allocations"] == [{"file": str(HERE), "line": line("L-oom"), "device": "cpu:0",
                                            "bytes": 4 << 40, "error": plain[1].splitlines()[0]}]
    del keep


def _live() -> int:
    gc.collect()  # what another test left in a reference cycle is gone before each count
    return len(jax.live_arrays())


def _live_counts(marks: list):
    """A block of array work; ``marks`` gets ``len(jax.live_arrays())`` at three points."""
    a = jnp.ones((64, 64))
    b = a * 2
    marks.append(_live())
    del a
    c = jax.jit(lambda v: v + 1)(b)
    marks.append(_live())
    del b, c
    marks.append(_live())


def test_the_recorder_never_extends_a_lifetime(tmp_path):
    _live_counts([])  # compiled once: JAX's caches keep constants of a first compile alive
    plain: list = []
    _live_counts(plain)
    base = _live()
    with recorded_memory(tmp_path):
        recorded: list = []
        _live_counts(recorded)
        after = _live()
    assert [n - plain[-1] for n in plain] == [n - recorded[-1] for n in recorded]
    assert after == base == plain[-1]


def test_a_store_without_memory_tables_has_no_report(tmp_path):
    golden = HERE.parent / "data" / "golden_runs" / "mlp_clean" / "events.sqlite"
    store = StoreReader(golden)
    assert not store.has_memory and list(store.frees()) == []
    assert memory_report(SimpleNamespace(store=store)) is None


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


def test_a_placement_policy_keeps_the_count(tmp_path, jax_devices):
    """A policy that moves committed data re-makes each result as an uncommitted Array over
    the same memory (capture/jaxhooks/engine.py): the buffer follows the new object, so what
    is live at the end is the three arrays the block keeps, each counted once."""
    from jaxplace_cli import device_placement

    with recorded_memory(tmp_path) as m:
        a = jax.device_put(jnp.ones((256, 256)), jax_devices[0])  # 256 KiB each, committed
        with device_placement("rr-strict"):
            c = a * 2
            d = c + 1
    assert sum(d_["end_bytes"] for d_ in m.doc["devices"]) == 3 * 256 * 1024
    del a, c, d


def _watch_cores():
    """The watch implementations: capture/_native.c's where it is built, and the Python twin."""
    from jaxplace_cli.capture import memory, native

    mod = native.module()
    return [memory._Core] + ([mod.WatchCore] if mod is not None else [])


@pytest.mark.parametrize("core_type", _watch_cores(), ids=lambda t: t.__module__.rsplit(".", 1)[-1])
def test_a_watch_appends_its_free_once_and_only_while_its_core_is_on(core_type):
    """The free of a tracked buffer (capture/memory.py): the watch's end appends (buf, the next
    seq, gc); an explicit release appends (buf, seq, how) once and ends it; a forgotten watch and
    any watch of a stopped core append nothing. Rows read back as three int64, by hand."""
    import itertools
    import struct

    frees, seqs = bytearray(), itertools.count(40)
    core = core_type(frees, seqs, "_jaxplace_watch")
    def rows():  # what Tracker.take reads: the frees handed over by flush()
        core.flush()
        return [struct.unpack("qqq", bytes(frees[i:i + 24])) for i in range(0, len(frees), 24)]

    w = core.watch(7, 3)
    assert (w.b, w.site, w.live, w.core is core) == (7, 3, True, True)
    del w  # the array holding it died: a "gc" free (how 0) at the next seq, 40
    next(seqs)  # an event drew 40
    w = core.watch(8, 3)
    assert w.release(2, 17) is True and w.release(2, 17) is False and not w.live  # "donated" at 17
    del w  # released: its end is no second free
    w = core.watch(9, 3)
    w.forget()
    del w
    w = core.watch(10, 3)
    core.on = False  # the recording stopped: the teardown's frees are no rows
    del w
    assert rows() == [(7, 40, 0), (8, 17, 2)]
    assert rows() == [(7, 40, 0), (8, 17, 2)]  # handed over once


def test_a_record_transfers_run_reports_no_memory_and_says_why(tmp_path):
    """`--record transfers` leaves the eager ops unhooked, so the arrays they make are not
    tracked: its audit has no memory object (a peak of what the rest made would be wrong), no
    memory rule among those checked, and a note saying so; the same script recorded by default
    has all three the other way round."""
    import json

    from conftest import audit_json, cli, jaxplace

    script = tmp_path / "s.py"
    script.write_text("import jax.numpy as jnp\nx = jnp.ones(256)\nfor i in range(5):\n    x = x * 2.0\n"
                      "    print(float(x[0]))\n")
    for mode, tracked in (("all", True), ("transfers", False)):
        proc = jaxplace("run", "-q", "--no-trace", "--record", mode, "--out", tmp_path / mode, script)
        assert proc.returncode == 0, proc.stderr
        r = audit_json(tmp_path / mode)
        assert ("memory" in r) == tracked, (mode, r.get("memory"))
        assert ("memory-growth" in r["rules"]["checked"]) == tracked
        assert any("--record transfers" in n and "device memory is not reported" in n for n in r["notes"]) != tracked
    # a [memory] budget on it is a breach that names the mode (not "recorded before jaxplace tracked frees")
    (tmp_path / "m.toml").write_text('[memory]\npeak = "1 GiB"\n')
    b = cli("audit", tmp_path / "transfers", "--budget", tmp_path / "m.toml", "--format", "json")
    (breach,) = json.loads(b.stdout)["budget"]["breaches"]
    assert "--record transfers" in breach["message"], breach
