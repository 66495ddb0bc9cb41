"""Issue 13 items 1-3: the bytes each device received, on every upload path.

In-process, real JAX on conftest's 4 simulated CPU devices, recorded with the hooks of
`jaxplace run` (tests/inprocess.py). Every expected number is computed by hand in a comment.
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import REPO, child_env, python
from inprocess import recorded
from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

pytestmark = pytest.mark.usefixtures("jax_devices")


def routes(ts):
    return [(t.kind, t.src, t.dst, t.bytes) for t in ts]


# -- 1. bytes at the device's dtype -------------------------------------------------------------

def test_float64_numpy_argument_arrives_as_float32():
    assert not jax.config.jax_enable_x64
    x = np.ones((1000, 1000))  # float64 on the host: 8,000,000 B
    with recorded() as r:
        f = jax.jit(lambda v: v * 2)
        for _ in range(3):
            y = f(x)
    assert y.dtype == np.float32
    # the device received float32: 3 x 1000 x 1000 x 4 B
    assert r.total("h2d") == (3, 12_000_000)
    # "jit(<lambda>)", or "jit(<lambda>) [test_fidelity_uploads.py:LINE]" when another lambda
    # of this test process was jitted first (names are unique per function in a process)
    (api,) = {t.api for t in r.of("h2d")}
    assert api.startswith("jit(<lambda>)") and api.endswith(" (numpy argument)")


def test_int64_numpy_python_scalars_and_creation_functions():
    i64 = np.arange(1000, dtype=np.int64)  # 8,000 B on the host
    f64 = np.ones(250)  # 2,000 B on the host
    with recorded() as r:
        g = jax.jit(lambda a, b: a + b)
        g(i64, 3)  # int32[1000] = 4,000 B + the 3 (a weakly typed int32) = 4 B
        g(f64, 2.5)  # float32[250] = 1,000 B + 2.5 = 4 B
        g(np.float64(1.0), np.int64(2))  # two numpy scalars: 4 B each
        jnp.asarray(f64)  # 1,000 B
        jnp.array([1.0, 2.0, 3.0])  # a Python list, whole: float32[3] = 12 B
        jax.device_put(f64)  # 1,000 B
        jax.device_put(np.int64(7))  # 4 B
        jax.device_put(3.0)  # 4 B
    assert [t.bytes for t in r.of("h2d")] == [4000, 4, 1000, 4, 4, 4, 1000, 12, 1000, 4, 4]
    assert r.total("h2d") == (11, 7036)
    assert [t.api for t in r.of("h2d")][-5:] == [
        "jnp.asarray (host data)", "jnp.array (host data)", "jax.device_put", "jax.device_put",
        "jax.device_put"]


def test_x64_enabled_by_a_script_keeps_host_sizes(tmp_path):
    """With x64 on, float64 stays float64: the device receives the host's bytes."""
    from conftest import jaxplace

    script = tmp_path / "x64.py"
    script.write_text(
        "import jax\njax.config.update('jax_enable_x64', True)\n"
        "import jax.numpy as jnp, numpy as np\n"
        "f = jax.jit(lambda v: v * 2)\n"
        "print(f(np.ones((100, 10))).dtype, jnp.asarray(np.arange(5)).dtype)\n")
    run = tmp_path / "run"
    proc = jaxplace("run", "--no-trace", "--quiet", "--out", run, script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "float64 int64\n"
    ts = _transfers(run)
    # float64[100, 10] = 8,000 B; int64[5] = 40 B; the `* 2` is inside the jit (no upload)
    assert [(t[0], t[3]) for t in ts] == [("h2d", 8000), ("h2d", 40)]


def _transfers(run_dir):
    import sqlite3

    con = sqlite3.connect(run_dir / "events.sqlite")
    try:
        return con.execute("SELECT kind, src, dst, bytes, api FROM transfers ORDER BY seq").fetchall()
    finally:
        con.close()


# -- 2. every upload path -----------------------------------------------------------------------

def test_sharded_uploads_count_what_each_device_received(jax_devices):
    mesh = Mesh(np.array(jax_devices), ("x",))
    rows = NamedSharding(mesh, P("x"))
    batch = np.arange(8 * 256, dtype=np.float32).reshape(8, 256)  # 8,192 B
    with recorded() as r:
        a = jax.make_array_from_process_local_data(rows, batch)  # 4 shards of 2,048 B
        b = jax.device_put(batch, rows)  # the same
        c = jax.make_array_from_callback(batch.shape, rows, lambda idx: batch[idx])  # the same
        d = jax.device_put(batch, NamedSharding(mesh, P()))  # replicated: 4 x 8,192 B
        tree = jax.device_put({"w": batch, "n": np.ones(10, np.int64)},
                              {"w": rows, "n": NamedSharding(mesh, P())})  # 8,192 + 4 x 40 B
        parts = [jax.device_put(batch[2 * i:2 * i + 2], dv) for i, dv in enumerate(jax_devices)]
        e = jax.make_array_from_single_device_arrays(batch.shape, rows, parts)  # already there: 0 B
    for arr in (a, b, c, d, tree["w"], e):
        np.testing.assert_array_equal(np.asarray(arr), batch)
    h2d = r.of("h2d")
    # one row per leg, one leg per device that received data (the unit JAX's transfer guard
    # counts: it logs 4 host-to-device lines for each of these puts; issue 24)
    def legs(nbytes):
        return [("h2d", "host", f"cpu:{i}", nbytes) for i in range(4)]

    assert routes(h2d) == (legs(2048) * 3 + legs(8192)  # replicated: 4 x 8,192 B
                           + legs(40)  # a dict's leaves go in key order: "n", then "w"
                           + legs(2048) + legs(2048))
    assert [t.api for t in h2d[:12:4]] == ["jax.make_array_from_process_local_data",
                                           "jax.device_put", "jax.make_array_from_callback"]
    assert r.of("d2d") == [] and r.of("d2h") == []
    names = [o.name for o in r.ops]
    assert names.count("make_array_from_single_device_arrays") == 1


def test_same_layout_on_other_devices_is_d2d_per_moved_shard(jax_devices):
    d = jax_devices
    src = NamedSharding(Mesh(np.array(d[:2]), ("x",)), P("x"))
    dst = NamedSharding(Mesh(np.array([d[0], d[3]]), ("x",)), P("x"))
    x = jax.device_put(np.ones((8, 128), np.float32), src)  # 2 shards of 2,048 B
    with recorded() as r:
        y = jax.device_put(x, dst)
        z = jax.device_put(jnp.ones((4, 64)), d[2])  # one device to another: 1,024 B
    assert y.sharding == dst and z.devices() == {d[2]}
    # shard 0 stays on cpu:0; shard 1 moves cpu:1 -> cpu:3
    assert routes(r.of("d2d")) == [("d2d", "cpu:1", "cpu:3", 2048), ("d2d", "cpu:0", "cpu:2", 1024)]


def test_arguments_the_compiled_program_drops_are_never_uploaded(jax_devices):
    """JAX drops a jitted function's unused arguments (``keep_unused=False``) and never sends
    them: no leg, whatever they are — a Python scalar, NumPy data (also the same object passed
    at a kept position), an array on another device. Positional calls take the C hot path,
    keyword calls the Python one; JAX's guard logs the same (checked by hand with
    ``JAX_TRANSFER_GUARD=log``: 2 legs a call below, and no device-to-device one)."""
    c = np.arange(4, dtype=np.float32)  # 16 B
    x = jax.device_put(jnp.ones(4), jax_devices[0])  # committed to cpu:0
    with jax.default_device(jax_devices[1]):
        z = jnp.ones(4)  # uncommitted, on cpu:1: moved to cpu:0 where it is used
    with recorded() as r:
        f = jax.jit(lambda x, s, u, a, b, w: x * s + a)
        for _ in range(3):
            f(x, 2.0, 3.0, c, c, z)  # s (4 B) and a (16 B); u, b and w are dropped
        f(x, 1.5, u=2.5, a=c, b=c, w=z)  # the same through the Python path: 4 + 16 B
        g = jax.jit(lambda x, unused, used: x + used)
        g(x, z, z)  # z once kept (moved to cpu:0: 16 B), once dropped
    assert [(t.api.rsplit(" (", 1)[-1], t.bytes) for t in r.of("h2d")] == [
        ("Python scalar)", 4), ("numpy argument)", 16)] * 4
    assert routes(r.of("d2d")) == [("d2d", "cpu:1", "cpu:0", 16)]


def test_naming_host_data_keeps_no_local_of_the_callers_function_alive():
    """The second upload of the same NumPy data names the variable holding it (host_data.py
    ``_describe``), from the locals of the calling function's frame. Reading a function frame's
    ``f_locals`` stores a dict of its locals on the frame, which kept every one of them alive
    until the function returned: a ``del`` freed nothing, as under python it does (here, a
    weak reference's object; in a training loop, the arrays of the iteration that named it)."""
    import weakref

    class Held:
        pass

    from jaxplace_cli.model.events import MARKER_HOST_DATA

    a = np.ones(3, np.float32)
    with recorded() as r:
        f = jax.jit(lambda x: x * 2)
        held = Held()
        gone = weakref.ref(held)
        f(a)
        f(a)  # the same data again: named `a`
        del held
        assert gone() is None
        mine = locals()  # a dict the function holds itself is left as python leaves it
        exec("scale = 2.0")  # a name only that dict holds (3.11, 3.12)
        b = a + 1
        f(b)
        f(b)
        if sys.version_info < (3, 13):  # 3.13: locals() is a new snapshot each call
            assert mine is locals() and mine["b"] is b and mine["scale"] == 2.0
    assert [json.loads(m.value)["var"] for m in r.markers if m.kind == MARKER_HOST_DATA] == ["a", "b"]


def test_naming_host_data_leaves_names_only_the_frames_dict_holds():
    """A name ``exec`` (without a namespace) gave the function lives only in the frame's dict of
    locals; naming host data empties that dict of the function's own variables, not of those."""
    a = np.ones(3, np.float32)
    with recorded():
        f = jax.jit(lambda x: x * 2)
        exec("lr = 0.5")
        f(a)
        f(a)  # the same data again: named `a`
        assert eval("lr") == 0.5


def test_what_a_function_dropped_is_remembered_while_it_lives(jax_devices):
    """Whether a jitted function dropped an argument is remembered by the function's identity
    (capture/jaxhooks/common.py ``_KEPT``) and forgotten with it: a function made after it
    (CPython may give it the same id) is asked afresh. By hand: f uploads x (12 B), never
    ``unused``; g, which drops nothing, uploads both of its arguments (2 x 12 B), each call."""
    import gc

    from jaxplace_cli.capture.jaxhooks import common

    a, b = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    gc.collect()  # the functions of earlier tests are gone
    before = len(common._KEPT)
    with recorded() as r:
        for _ in range(3):
            f = jax.jit(lambda x, unused: x * 2)
            f(a, b)
            f(a, b)
            assert len(common._KEPT) == before + 1
            del f
            gc.collect()
            assert len(common._KEPT) == before
            g = jax.jit(lambda x, y: x * y)
            g(a, b)
            del g
            gc.collect()
    assert [t.bytes for t in r.of("h2d")] == [12, 12, 12, 12] * 3


def test_arguments_the_program_drops_under_a_policy(jax_devices):
    """The same under a placement policy, which runs the jit on its device through a wrapper:
    x moved by the policy (16 B), s (4 B) and a (16 B) uploaded; u and b dropped (they were
    counted: the wrapper hid the jitted function whose kept arguments say so)."""
    import jaxplace_cli

    c = np.arange(4, dtype=np.float32)
    x = jax.device_put(jnp.ones(4), jax_devices[0])
    with recorded() as r, jaxplace_cli.device_placement("pin:cpu:1"):
        f = jax.jit(lambda x, s, u, a, b: x * s + a)
        y = f(x, 2.0, 3.0, c, c)
    assert y.devices() == {jax_devices[1]}
    assert routes(r.of("d2d")) == [("d2d", "cpu:0", "cpu:1", 16)]
    assert routes(r.of("h2d")) == [("h2d", "host", "cpu:1", 4), ("h2d", "host", "cpu:1", 16)]


def test_a_compiled_function_that_donates_or_returns_nothing():
    """A compiled function that donates its argument frees it at each call (the memory
    timeline's peak was twice the array: the donation was not seen); one that returns no array
    (a ``jax.new_ref`` updated in place: JAX's own ``thread_map`` compiles such) is an op each
    call too, and its NumPy argument's upload a leg of it (4,000 B by hand; the guard logs 3
    legs). It was no op, its legs named ``jax.create_cpp_call``, JAX's internal function."""
    x = jnp.ones(1000)
    ref = jax.new_ref(jnp.zeros(1000))

    def add(r, v):
        r[...] += v

    with recorded() as r:
        c = jax.jit(lambda v: v * 2, donate_argnums=0).lower(x).compile()
        for _ in range(3):
            x = c(x)
        c2 = jax.jit(add).lower(ref, np.ones(1000, np.float32)).compile()
        for _ in range(3):
            c2(ref, np.ones(1000, np.float32))
    assert [how for _, _, how in r.frees].count("donated") == 3
    # add's jit name: "jit(add)", with its line where another add took that name in this process
    name = r.ops[-1].name
    assert name in ("jit(add)", "jit(add) [test_fidelity_uploads.py:258]")
    assert [(t.bytes, t.api) for t in r.of("h2d")] == [(4000, f"{name} (numpy argument)")] * 3
    assert [o.name for o in r.ops][-3:] == [name] * 3
    np.testing.assert_array_equal(np.asarray(ref[...]), np.full(1000, 3.0, np.float32))


@pytest.mark.parametrize("granularity", ["unit", "op"])
def test_a_compiled_function_runs_where_it_was_compiled_under_a_policy(jax_devices, granularity):
    """No policy places a call of a function compiled ahead of time: it runs on the devices it
    was compiled for (moving its data would make it fail; with ``granularity="op"`` the
    placer's partitioning of a jit raised AttributeError into the user's call)."""
    import jaxplace_cli

    n = np.ones(4, np.float32)
    with recorded() as r, jaxplace_cli.device_placement("rr", granularity=granularity):
        c = jax.jit(lambda x, a: x * a).lower(n, 2.0).compile()
        ys = [c(n, 3.0) for _ in range(2)]
    assert [y.devices() for y in ys] == [{jax_devices[0]}] * 2
    np.testing.assert_array_equal(np.asarray(ys[1]), n * 3)
    names = [o.name for o in r.ops]  # the lambda's jit name (see the test below)
    assert len(names) == 2 and len(set(names)) == 1 and names[0].startswith("jit(<lambda>)") and r.of("d2d") == []


def test_a_policy_run_per_op_counts_each_upload_once(jax_devices):
    """``--granularity op`` runs a jit's ops one by one and uploads its host arguments itself
    (recorded there): the call counted them again (2 legs each). By hand: the 2.0 (4 B) and the
    NumPy array (16 B), once."""
    import jaxplace_cli

    x = jnp.ones(4)
    with recorded() as r, jaxplace_cli.device_placement("rr", granularity="op"):
        f = jax.jit(lambda x, s, a: jnp.sin(x) * s + a)
        y = f(x, 2.0, np.ones(4, np.float32))
    np.testing.assert_allclose(np.asarray(y), np.sin(1.0) * 2 + 1, rtol=1e-6)
    assert sorted(t.bytes for t in r.of("h2d")) == [4, 16]


def test_a_policy_run_per_op_uploads_where_the_op_runs_and_only_what_it_reads(jax_devices):
    """The per-op run uploaded every host argument to the default device first, then moved it
    to the op's device (an upload and a move for one), and uploaded the arguments the program
    drops (JAX uploads none). By hand, pinned to cpu:1: ``x``'s 12 B straight onto cpu:1;
    ``unused``: nothing; no device-to-device leg."""
    import jaxplace_cli

    with recorded() as r, jaxplace_cli.device_placement("pin:cpu:1", granularity="op"):
        f = jax.jit(lambda x, unused: x * 2)
        y = f(np.ones(3, np.float32), np.ones(5, np.float32))
    np.testing.assert_array_equal(np.asarray(y), np.full(3, 2.0, np.float32))
    assert routes(r.of("h2d")) == [("h2d", "host", "cpu:1", 12)] and r.of("d2d") == []


def test_a_policy_run_per_op_leaves_a_jit_with_a_mutable_reference_to_jax(jax_devices):
    """A jit whose argument is a ``jax.new_ref`` (updated in place) under ``--granularity op``:
    the per-op replay raised "Out of bound indexer" into a correct program; it is not placed
    (it runs where the reference lives: the next test)."""
    import jaxplace_cli

    ref = jax.new_ref(jnp.zeros(3))

    def add(r, x):
        r[...] += x
        return x * 2

    with recorded(), jaxplace_cli.device_placement("rr", granularity="op"):
        g = jax.jit(add)
        outs = [g(ref, np.ones(3, np.float32)) for _ in range(3)]
    np.testing.assert_array_equal(np.asarray(ref[...]), np.full(3, 3.0, np.float32))
    np.testing.assert_array_equal(np.asarray(outs[-1]), np.full(3, 2.0, np.float32))


@pytest.mark.parametrize("policy", ["rr", "pin:cpu:0"])
def test_a_call_with_a_mutable_reference_runs_where_the_reference_lives(jax_devices, policy):
    """A ``jax.new_ref`` stays on its device: JAX runs the call there. A policy placed such a
    call elsewhere and moved the other operands: an array committed to a third device was moved
    too, and the call that JAX refuses under python ("incompatible devices") ran; an
    uncommitted one was moved away, then back. By hand: the call fails as under python, and with
    ``u`` (uncommitted, cpu:0) JAX moves it to cpu:1 once (16 B), the policy nothing."""
    import jaxplace_cli

    ref = jax.new_ref(jax.device_put(jnp.zeros(4), jax_devices[1]))
    c = jax.device_put(jnp.ones(4), jax_devices[2])
    u = jnp.ones(4)
    with recorded() as r, jaxplace_cli.device_placement(policy):
        upd = jax.jit(lambda ref, v: ref.__setitem__(Ellipsis, ref[...] + v))
        with pytest.raises(ValueError, match="incompatible devices"):
            upd(ref, c)
        upd(ref, u)
    np.testing.assert_array_equal(np.asarray(ref[...]), np.ones(4, np.float32))
    assert routes(r.of("d2d")) == [("d2d", "cpu:0", "cpu:1", 16)]
    assert [o.placed for o in r.ops if o.name.startswith("jit(")] == ["", ""]


def test_an_index_update_of_an_array_on_another_device(jax_devices):
    """``x.at[1].set(2.0)`` of an ``x`` committed to cpu:1: JAX makes the index and the value on
    the default device (two 4 B uploads onto cpu:0) and its scatter moves both to cpu:1 (two
    4 B device-to-device legs; the guard logs the same). One op around the update lost the two
    moves (tried 2026-12-06: docs/fidelity.md)."""
    x = jax.device_put(jnp.zeros(4), jax_devices[1])
    with recorded() as r:
        y = x.at[1].set(2.0)
    assert y.devices() == {jax_devices[1]}
    assert routes(r.of("h2d")) == [("h2d", "host", "cpu:0", 4)] * 2
    assert routes(r.of("d2d")) == [("d2d", "cpu:0", "cpu:1", 4)] * 2


def test_every_call_of_an_ahead_of_time_compiled_function_is_a_jit_call():
    """``jax.jit(f).lower(...).compile()`` called in a loop: JAX runs the first call on its
    Python path and the others in C++, which the hooks did not see (1 call of 3 recorded). Each
    is an op now, with its legs: x (16 B) and a (4 B); b is dropped by the compiled program, so
    never sent (by hand; the guard logs 2 legs a call, the later ones without their aval)."""
    n = np.ones(4, np.float32)
    with recorded() as r:
        c = jax.jit(lambda x, a, b: x * a).lower(n, 2.0, n).compile()
        for _ in range(3):
            y = c(n, 3.0, n)
    np.testing.assert_array_equal(np.asarray(y), n * 3)
    # the lambda's jit name: "jit(<lambda>)", with its line where another lambda took that name
    # in this process (capture/jaxhooks/jit.py jit_name)
    names = [o.name for o in r.ops]
    assert len(names) == 3 and len(set(names)) == 1 and names[0].startswith("jit(<lambda>)")
    assert [t.bytes for t in r.of("h2d")] == [16, 4] * 3


HOISTED = """import sys
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp, numpy as np
from inprocess import recorded
C = jnp.arange(1000, dtype=jnp.float32)
with recorded() as r:
    f = jax.jit(lambda x, y: y + C.sum())  # x unused: dropped
    for _ in range(3):
        f(np.ones(4, np.float32), np.ones(8, np.float32))
print([t.bytes for t in r.of("h2d")])
"""


def test_dropped_arguments_where_jax_hoists_the_constants(tmp_path):
    """With JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS (read at import: a process of its own) the
    executable's kept indexes count the hoisted constant ``C`` first: the dropped ``x`` was
    counted and the kept ``y`` not told apart (6 legs). By hand: y, 32 B, a call."""
    script = tmp_path / "hoisted.py"
    script.write_text(HOISTED)
    r = python(script, REPO / "tests", env=child_env(JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["[32, 32, 32]"]


# -- 3. a reshard through the host --------------------------------------------------------------

def test_reshard_through_host_records_both_legs(jax_devices):
    d = jax_devices
    four = NamedSharding(Mesh(np.array(d), ("x",)), P("x"))
    two = NamedSharding(Mesh(np.array(d[2:]), ("x",)), P("x"))
    x = jax.device_put(np.arange(16 * 256, dtype=np.float32).reshape(16, 256), four)
    with recorded() as r:
        y = jax.device_put(x, two)  # 4 shards of 4 rows -> 2 shards of 8 rows: no shard fits
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    # the whole array (16 x 256 x 4 = 16,384 B) to the host, then two 8,192 B slices back: one
    # leg per device (the guard logs 2 host-to-device lines)
    assert routes(r.transfers) == [("d2h", "cpu:0-3", "host", 16384), ("h2d", "host", "cpu:2", 8192),
                                   ("h2d", "host", "cpu:3", 8192)]
    assert all(t.api == "jax.device_put (through host)" and t.implicit for t in r.transfers)


# -- callbacks and asynchronous reads -----------------------------------------------------------

def test_callback_legs():
    x = jnp.ones((256,), np.float32)  # 1,024 B
    seen = []
    with recorded() as r:
        f = jax.jit(lambda v: jax.pure_callback(lambda a: np.asarray(a) * 2,
                                                jax.ShapeDtypeStruct(v.shape, v.dtype), v) + 1)
        for _ in range(3):
            f(x).block_until_ready()
        g = jax.jit(lambda v: io_callback(lambda a: np.float64(a.sum()),  # float64 -> float32
                                          jax.ShapeDtypeStruct((), np.float32), v))
        g(x).block_until_ready()
        h = jax.jit(lambda v: jax.debug.callback(lambda a: seen.append(float(a.sum())), v) or v)
        h(x).block_until_ready()
    assert seen == [256.0]
    # pure_callback x3: 1,024 B out and 1,024 B back; io_callback: 1,024 B out, 4 B back;
    # debug.callback: 1,024 B out, nothing back; reads inside the callbacks move nothing more
    assert [(t.kind, t.bytes, t.api) for t in r.transfers] == [
        *[("d2h", 1024, "jax.pure_callback (operands to host)"),
          ("h2d", 1024, "jax.pure_callback (results to device)")] * 3,
        ("d2h", 1024, "jax.experimental.io_callback (operands to host)"),
        ("h2d", 4, "jax.experimental.io_callback (results to device)"),
        ("d2h", 1024, "jax.debug.callback (operands to host)"),
    ]
    assert {(t.src, t.dst) for t in r.of("d2h")} == {("cpu:0", "host")}


def test_copy_to_host_async_is_one_non_blocking_read():
    with recorded() as r:
        x = jnp.arange(1024, dtype=np.float32)  # 4,096 B
        x.copy_to_host_async()
        total = float(np.asarray(x).sum()) + float(x[3])
    assert total == 523776.0 + 3.0
    # the async copy is the only read of x; x[3] is a new 4 B array, read (and waited for)
    assert [(t.kind, t.bytes, t.blocking, t.api) for t in r.of("d2h")] == [
        ("d2h", 4096, False, ".copy_to_host_async()"), ("d2h", 4, True, "float()")]
    # x[3] uploads its index: one int32 (jax.transfer_guard_host_to_device("log") says 1)
    assert [(t.bytes, t.api) for t in r.of("h2d")] == [(4, "x[i] (Python scalar)")]


# -- x[idx]: the index JAX uploads ---------------------------------------------------------------

_X1, _X2, _X3 = (10,), (4, 5), (3, 4, 5)
# expected uploads by hand: JAX's static path turns a unit-stride slice into a dynamic_slice
# whose start indices, one per dimension of x, are uploaded (4 B int32 each); a strided or
# trivial slice uploads nothing
INDEXES = [
    (_X1, lambda x: x[1], 1), (_X1, lambda x: x[-1], 1), (_X1, lambda x: x[1:3], 1), (_X1, lambda x: x[2:], 1),
    (_X1, lambda x: x[::2], 0), (_X1, lambda x: x[None], 0), (_X1, lambda x: x[::-1], 0),
    (_X2, lambda x: x[0], 2), (_X2, lambda x: x[0, 1], 2), (_X2, lambda x: x[:, 0], 2), (_X2, lambda x: x[1:3], 2),
    (_X2, lambda x: x[..., 1], 2), (_X2, lambda x: x[0, ::2], 0), (_X2, lambda x: x[np.int64(1)], 2),
    (_X3, lambda x: x[0], 3), (_X3, lambda x: x[:, :, 2], 3),
]


@pytest.mark.parametrize("shape,index,n", INDEXES, ids=[f"{len(s)}d-{i}" for i, (s, _, _) in enumerate(INDEXES)])
def test_index_uploads_one_int_per_dimension(shape, index, n, capfd):
    x = jnp.ones(shape)
    index(x).block_until_ready()  # compiled once, outside the recording
    with recorded() as r:
        index(x).block_until_ready()
    assert [(t.bytes, t.api, t.dst) for t in r.of("h2d")] == [(4, "x[i] (Python scalar)", "cpu:0")] * n
    assert [o.name for o in r.ops] == ["getitem"]
    # JAX's own count of the same call agrees
    capfd.readouterr()
    with jax.transfer_guard_host_to_device("log"):
        index(x).block_until_ready()
    assert capfd.readouterr().err.count("host-to-device transfer") == n


def test_where_a_call_that_returns_no_array_ran_is_told_for_each_call(jax_devices):
    """A jit call that returns no array: where it ran, read from its compiled program's input
    shardings (inputs.py), once per everything that decides them. By hand: ``f`` uses its
    argument in a callback only, so each call uploads its 16 B where it runs: cpu:0, then cpu:1
    under ``jax.default_device`` (the same signature: the legs went to cpu:0 twice); ``g``'s
    static flag decides whether ``v`` is used at all: 0 legs, then 16 B (the same shapes: 0
    twice); a ``None`` argument is no leaf of the program's arguments (the lengths differed and
    nothing was recorded); ``split``'s 16 B go half to each device of the mesh in effect (the
    second mesh's call went to the first's devices)."""
    import functools

    v = np.ones(4, np.float32)
    ref = jax.new_ref(jnp.zeros(4))
    with recorded() as r:  # functions jitted while recorded, as a script's under `jaxplace run`
        @jax.jit
        def f(x):
            jax.debug.callback(lambda a: None, x.sum())

        @functools.partial(jax.jit, static_argnums=2)
        def g(ref, v, use):
            if use:
                ref[...] += v

        @jax.jit
        def h(ref, nothing, v):
            ref[...] += v

        f(v)
        with jax.default_device(jax_devices[1]):
            f(v)
        g(ref, v, False)
        g(ref, v, True)
        h(ref, None, v)
        def halves(x):
            jax.debug.callback(lambda a: None, x.sum())

        split = jax.jit(halves, in_shardings=P("x"))
        for mesh in (Mesh(np.array(jax_devices[:2]), ("x",)), Mesh(np.array(jax_devices[2:]), ("x",))):
            with jax.set_mesh(mesh):
                split(v)
    assert [(t.dst, t.bytes, t.api) for t in r.of("h2d")] == [
        ("cpu:0", 16, "jit(f) (numpy argument)"), ("cpu:1", 16, "jit(f) (numpy argument)"),
        ("cpu:0", 16, "jit(g) (numpy argument)"), ("cpu:0", 16, "jit(h) (numpy argument)")] + [
        (f"cpu:{i}", 8, "jit(halves) (numpy argument)") for i in range(4)]
    # (g's first call keeps no argument at all: an empty program, no op)
    assert [(o.name, o.devices) for o in r.ops] == [("jit(f)", "cpu:0"), ("jit(f)", "cpu:1"), ("jit(g)", "cpu:0"),
                                                    ("jit(h)", "cpu:0"), ("jit(halves)", "cpu:0,cpu:1"),
                                                    ("jit(halves)", "cpu:2,cpu:3")]
    np.testing.assert_array_equal(np.asarray(ref[...]), np.full(4, 2.0, np.float32))
