"""The C hot path (capture/_native.c) and its Python twin (dispatch.python_record_call) record
the same rows, call by call, in this process (issue 23).

Each generated call is built twice from one recipe (fresh arrays, so no buffer id carries
over) and run once through each path, each on a fresh recorder; the rows must be equal but
for the clock (start times and durations). Real JAX on conftest's 4 simulated CPU devices:
eager ops and jit calls with arrays on different devices, committed or not, sharded arrays,
Python scalars, numpy arrays, sequences, pytrees, keyword arguments, static arguments, list
and tuple results, and calls that raise. Then the packed rows' decoder (model/_packed.c)
under arbitrary and damaged bytes: a clean ValueError or rows, never a crash or a hang.
"""
from __future__ import annotations

import collections
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxplace_cli.capture.jaxhooks import dispatch
from jaxplace_cli.capture.jaxhooks.jit import jit_name
from jaxplace_cli.capture.jaxhooks.state import CallSpec, active
from jaxplace_cli.capture.recorder import Recorder
from jaxplace_cli.model.events import OP_JIT, OP_JNP, OP_PRIM

try:
    from jaxplace_cli.capture import _native
    from jaxplace_cli.model import _packed
except ImportError:  # no C compiler where the package was installed: nothing to compare
    _native = _packed = None

pytestmark = pytest.mark.skipif(_native is None, reason="the C extensions are not built here")

@pytest.fixture(autouse=True)
def _no_placement(monkeypatch):
    """No placer of an earlier test in this process: with ``active.placing`` on (it stays on
    once a policy was used), record_call hands every call to the Python path, and the twins
    would compare the Python code with itself."""
    monkeypatch.setattr(active, "placing", False)


SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---------------------------------------------------------------- operands


@st.composite
def operands(draw, allow_sharded=True):
    """A recipe for one operand (built fresh per path by `build`)."""
    kind = draw(st.sampled_from(["committed", "committed", "uncommitted", "scalar", "scalar", "numpy"]
                                + (["sharded"] if allow_sharded else [])))
    if kind == "scalar":  # each type uploads its own size
        return ("scalar", draw(st.sampled_from([2, 0.5, True, 1 + 2j, -3, False])))
    if kind == "sharded":
        return ("sharded", None)
    shape = draw(st.sampled_from([(), (4,), (4,), (3,)]))
    dtype = draw(st.sampled_from(["float32", "int32", "float64"]))
    device = draw(st.sampled_from([0, 0, 1, 3])) if kind == "committed" else 0  # 2 devices: an error
    return (kind, (shape, dtype, device))


def build(recipe):
    kind, how = recipe
    if kind == "scalar":
        return how
    if kind == "sharded":
        mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
        return jax.device_put(np.arange(4, dtype=np.float32), NamedSharding(mesh, PartitionSpec("x")))
    shape, dtype, device = how
    host = (np.arange(int(np.prod(shape)), dtype=np.float64) + 1).reshape(shape).astype(dtype)
    if kind == "numpy":
        return host
    if kind == "uncommitted":
        return jax.device_put(host)  # on the default device, free to move
    return jax.device_put(host, jax.devices()[device])


# ---------------------------------------------------------------- calls


def _jit_fns():
    def add(a, b):
        return a + b

    def pair(a, b):
        return a + b, a * b

    def as_list(a, b):
        return [a - b, a * 2]

    def as_dict(a, b):
        return {"s": a + b, "d": a - b}

    def first(a, b):
        return a

    def nested(ab, c):
        return ab[0] * c + ab[1]

    def dict_in(p, c):  # a params dict, as every training step passes one
        return p["w"] * c + p["b"]

    def scaled(a, n, b=1.0):
        return a * n + b

    def deep(t, c):  # nested containers, None leaves, a dict whose keys are not in sorted order
        return {"z": [t["z"][0] * c, None], "a": (t["a"] + t["z"][2][0],)}

    def pair_in(p, c):  # a namedtuple operand: not a container the C code flattens itself
        return p.first * c + p.second

    def static_first(n, x, unused):  # a static argument before a leaf the program drops
        return x * n

    def fails(a, b):
        raise ValueError("a jitted function that raises")

    return {f.__name__: f for f in (add, pair, as_list, as_dict, first, nested, dict_in, scaled, deep, pair_in,
                                    static_first, fails)}


Pair = collections.namedtuple("Pair", "first second")
JIT_FNS = _jit_fns()
JITTED = {name: jax.jit(f) for name, f in JIT_FNS.items()}
JITTED["scaled_static"] = jax.jit(JIT_FNS["scaled"], static_argnums=(1,))
JITTED["static_first"] = jax.jit(JIT_FNS["static_first"], static_argnums=(0,))
JITTED["scaled_static_np"] = jax.jit(JIT_FNS["scaled"], static_argnums=(np.int64(1),))  # kept as given
STATICS = {"scaled_static": (1,), "static_first": (0,), "scaled_static_np": (np.int64(1),)}

EAGER = {  # name -> (function, number of operands, scalar_operands)
    "add": (jnp.add, 2, True),
    "multiply": (jnp.multiply, 2, True),
    "maximum": (jnp.maximum, 2, True),
    "divmod": (jnp.divmod, 2, True),  # a tuple of two results
    "sin": (jnp.sin, 1, True),
    "asarray": (jnp.asarray, 1, False),  # an array in, the same array out: nothing dispatched
    "array": (jnp.array, 1, False),
    "zeros_like": (jnp.zeros_like, 1, False),
    "meshgrid": (jnp.meshgrid, 2, False),  # a list of results
    "split": (lambda x: jnp.split(x, 2), 1, False),
}


@st.composite
def calls(draw):
    """A recipe: (path-independent description, how to build spec/fn/args/kwargs)."""
    form = draw(st.sampled_from(["eager", "eager", "stack", "kwargs", "prim", "jit", "jit"]))
    if form == "eager":
        name = draw(st.sampled_from(sorted(EAGER)))
        n = EAGER[name][1]
        return (form, name, [draw(operands()) for _ in range(n)], {}, draw(st.booleans()))
    if form == "stack":  # a list among the operands
        return (form, "stack", [draw(operands(allow_sharded=False)) for _ in range(draw(st.integers(1, 3)))],
                {}, False)
    if form == "kwargs":
        return (form, "sum", [draw(operands(allow_sharded=False))],
                {"axis": draw(st.sampled_from([None, 0])), "keepdims": draw(st.booleans())}, False)
    if form == "prim":
        return (form, draw(st.sampled_from(["sin", "neg"])), [draw(operands(allow_sharded=False))], {},
                draw(st.booleans()))
    name = draw(st.sampled_from(sorted(JITTED)))
    if name in ("nested", "dict_in", "pair_in"):
        form_ = {"nested": "tuple", "dict_in": "dict", "pair_in": "named"}[name]
        args = [(form_, [draw(operands()), draw(operands())]), draw(operands())]
    elif name == "deep":
        args = [("deep", [draw(operands()), draw(operands()), draw(operands())]), draw(operands())]
    elif name in ("scaled", "scaled_static", "scaled_static_np"):
        args = [draw(operands()), ("scalar", draw(st.sampled_from([2, 3])))]
    else:
        args = [draw(operands()), draw(operands())]
    kwargs = {}
    if name == "scaled" and draw(st.booleans()):
        kwargs = {"b": draw(operands(allow_sharded=False))}
    return ("jit", name, args, kwargs, False)


def materialise(call):
    """spec, fn, args, kwargs, backward of a recipe, with fresh operands."""
    form, name, arg_recipes, kw_recipes, backward = call

    def one(r):
        if r[0] == "dict":
            return {"w": build(r[1][0]), "b": build(r[1][1])}
        if r[0] == "deep":
            return {"z": (build(r[1][0]), None, [build(r[1][1])]), "a": build(r[1][2])}
        if r[0] == "named":
            return Pair(build(r[1][0]), build(r[1][1]))
        return tuple(build(x) for x in r[1]) if r[0] == "tuple" else build(r)

    args = tuple(one(r) for r in arg_recipes)
    kwargs = {k: (v if not isinstance(v, tuple) else build(v)) for k, v in kw_recipes.items()}
    if form == "eager":
        fn, _, scalars = EAGER[name]
        return CallSpec(name, OP_JNP, scalar_operands=scalars), fn, args, kwargs, backward
    if form == "stack":
        return CallSpec("stack", OP_JNP), jnp.stack, (list(args),), kwargs, backward
    if form == "kwargs":
        return CallSpec("sum", OP_JNP), jnp.sum, args, kwargs, backward
    if form == "prim":
        prim = {"sin": lax.sin_p, "neg": lax.neg_p}[name]
        return (CallSpec(name, OP_PRIM, scalar_operands=True), lambda *a: prim.bind(*a), args, kwargs,
                backward)
    statics = STATICS.get(name, ())
    spec = CallSpec(jit_name(JIT_FNS.get(name, JIT_FNS["scaled"])), OP_JIT, scalar_operands=True,
                    flatten=True, static_argnums=statics)
    return spec, JITTED[name], args, kwargs, backward


# ---------------------------------------------------------------- the twins

NATIVE = dispatch.configure_native(_native) if _native is not None else None


def _invoke(record_call, spec, fn, args, kwargs, backward):
    # one line for both paths: the site both record is this frame's
    return record_call(spec, fn, args, kwargs, backward=backward)


def _without_clock(rows, times):
    return [tuple(0 if i in times else v for i, v in enumerate(r)) for r in rows]


def run_path(record_call, call, packed: bool):
    """(rows, outcome) of one call through one path on a fresh recorder."""
    spec, fn, args, kwargs, backward = materialise(call)
    rec = Recorder()
    if packed:  # rows encoded as they are appended (model/_packed.c), as under `jaxplace run`
        rec.attach_writer(threading.Event())
    previous, active.rec = active.rec, rec
    try:
        out = _invoke(record_call, spec, fn, args, kwargs, backward)
        outcome = ("returned", [repr(np.asarray(x).tolist()) for x in jax.tree_util.tree_leaves(out)])  # nan == nan
    except Exception as exc:
        outcome = ("raised", type(exc).__name__, str(exc))
    finally:
        active.rec = previous
    rec.detach_writer()
    rows = rec.drain() if packed else rec.take()
    return {
        "ops": _without_clock(rows["ops"], (1, 2)),
        "transfers": _without_clock(rows["transfers"], (1,)),
        "buffers": [tuple(b) for b in rows["buffers"]],
        "sites": [tuple(s) for s in rows["sites"]],
        "stacks": [tuple(s) for s in rows["stacks"]],  # the call-stack trie (issue 28)
        "transfer_stacks": [tuple(s) for s in rows.get("transfer_stacks", ())],
        "tail": dict(rec.tail),
        "progs": dict(rec.progs),  # a jit call: the newest program per device (syncs.program)
        "recording_errors": rec.recording_errors,
    }, outcome


def both_paths(call, packed: bool):
    """[(rows, outcome) native, (rows, outcome) Python]: from one line, so that the whole call
    stack (issue 28: its outer frames too) is the same for both."""
    return [run_path(path, call, packed) for path in (NATIVE, dispatch.python_record_call)]


def patched_run(attr: str, replacement, call, packed: bool):
    """run_path of the C code with dispatch.<attr> replaced (a counting _after_call or
    tree_leaves), which configure_native hands to it; put back after."""
    with pytest.MonkeyPatch.context() as mp:  # not `monkeypatch`: its undo would end _no_placement's
        mp.setattr(dispatch, attr, replacement)
        counting = dispatch.configure_native(_native)
        try:
            return run_path(counting, call, packed)
        finally:
            mp.undo()
            dispatch.configure_native(_native)


@SETTINGS
@given(call=calls(), packed=st.booleans())
def test_native_and_python_record_call_append_the_same_rows(call, packed):
    (native_rows, native_out), (python_rows, python_out) = both_paths(call, packed)
    assert native_out == python_out
    assert native_rows == python_rows
    assert native_rows["recording_errors"] == 0


def test_the_generated_calls_reach_every_branch():
    """The generator is not vacuous: the twins above meet the C-recorded cases, the ones C
    hands to Python, results that are lists, multi-device results and raised calls (each
    checked on a hand-written call, rows counted by hand)."""
    committed = ("committed", ((4,), "float32", 1))
    uncommitted = ("uncommitted", ((4,), "float32", 0))
    cases = [
        # (ops, transfers, buffers): a new input is a buffer row; one result rides in the op row
        (("eager", "add", [committed, uncommitted], {}, False), (1, 1, 2)),  # d2d of the uncommitted input
        (("eager", "meshgrid", [committed, committed], {}, False), (1, 0, 4)),  # a list: a row per result
        (("eager", "multiply", [committed, ("scalar", 0.5)], {}, False), (1, 1, 1)),  # scalar upload
        # the numpy operand of a jit over 4 devices: one leg per device (JAX's transfer guard
        # logs 4 host-to-device lines for it; the unit is legs, docs/fidelity.md)
        (("jit", "add", [("sharded", None), ("numpy", ((4,), "float32", 0))], {}, False), (1, 4, 1)),
        (("jit", "fails", [committed, committed], {}, False), (1, 0, 2)),  # the failed call's row
        (("eager", "asarray", [committed], {}, False), (0, 0, 0)),  # nothing dispatched
    ]
    for call, (n_ops, n_transfers, n_buffers) in cases:
        (rows, out), (twin, twin_out) = both_paths(call, packed=False)
        assert (rows, out) == (twin, twin_out), call
        assert (len(rows["ops"]), len(rows["transfers"]), len(rows["buffers"])) == (n_ops, n_transfers, n_buffers), call


def test_keyword_sequence_and_static_operands_are_recorded_in_c():
    """A call without scalar operands whose arguments hold keywords (``jnp.sum(x, axis=0)``), a
    list (``jnp.stack([a, b])``) or inert values (inert_leaves), and a jit call with a static
    positional argument (operand_args: a training step with a static config) are recorded by the
    C code, not handed to dispatch._after_call, with the Python twin's rows; a jit call with a
    keyword still is (issue 29; the cost: bench/README.md round 19). Rows counted by hand."""
    committed = ("committed", ((4,), "float32", 1))
    uncommitted = ("uncommitted", ((4,), "float32", 0))
    numpy = ("numpy", ((4,), "float32", 0))
    cases = [  # (call, (ops, transfers, buffers), handed to Python)
        (("kwargs", "sum", [committed], {"axis": 0, "keepdims": True}, False), (1, 0, 1), False),
        (("kwargs", "sum", [uncommitted], {"axis": None, "keepdims": False}, False), (1, 0, 1), False),
        # the uncommitted input moves to the committed one's device: a d2d leg
        (("stack", "stack", [committed, uncommitted], {}, False), (1, 1, 2), False),
        # NumPy data and a scalar in the list: no leg of the op's own (its inner dispatches count theirs)
        (("stack", "stack", [committed, numpy, ("scalar", 2)], {}, False), (1, 0, 1), False),
        (("jit", "scaled", [committed, ("scalar", 2)], {"b": committed}, False), (1, 1, 2), True),
        # n static: compiled in, never uploaded (no leg); the input's buffer row, the result in the op's
        (("jit", "scaled_static", [committed, ("scalar", 2)], {}, False), (1, 0, 1), False),
        (("jit", "scaled_static", [uncommitted, ("scalar", 3)], {}, False), (1, 0, 1), False),
        # after the static n, `unused` (NumPy data) is the second dynamic leaf and the one the
        # program drops: no leg (legs.dropped_leaves counts without the static positions)
        (("jit", "static_first", [("scalar", 2), committed, numpy], {}, False), (1, 0, 1), False),
        # a static number that is not a Python int (jax.jit keeps np.int64 as given): the
        # Python code reads it, as static_positions does (operand_args raised here, losing the row)
        (("jit", "scaled_static_np", [committed, ("scalar", 2)], {}, False), (1, 0, 1), True),
    ]
    for call, counts, to_python in cases:
        handed = []
        original = dispatch._after_call

        def counted(*args, handed=handed, original=original):
            handed.append(args[1].name)
            return original(*args)

        rows, _ = patched_run("_after_call", counted, call, False)
        assert bool(handed) == to_python, (call, handed)
        (native_rows, native_out), (python_rows, python_out) = both_paths(call, packed=True)
        assert native_out == python_out and native_rows == python_rows, call
        assert (len(rows["ops"]), len(rows["transfers"]), len(rows["buffers"])) == counts, (call, rows)


def _caller_a(call, packed):  # two callers of one helper: two stacks, one site (_invoke's)
    return _helper(call, packed)


def _caller_b(call, packed):
    return _helper(call, packed)


def _helper(call, packed):
    return both_paths(call, packed)


def _stack_functions(nodes: list, node: int) -> list[str]:
    by_id = {n[0]: n for n in nodes}
    out = []
    while node:
        out.append(by_id[node][4])  # StackNode: node, parent, file, line, function
        node = by_id[node][1]
    return out[::-1]


def test_the_twins_record_the_same_call_stacks():
    """Each transfer's stack node (issue 28) names the user frames from the test down to the
    call, both paths alike; the two callers of one helper are two stacks at one site."""
    upload = ("eager", "multiply", [("committed", ((4,), "float32", 1)), ("scalar", 0.5)], {}, False)
    moved = ("eager", "add", [("committed", ((4,), "float32", 1)), ("uncommitted", ((4,), "float32", 0))], {}, False)
    leaves = {}
    for caller in (_caller_a, _caller_b):
        for call in (upload, moved):
            (rows, out), (twin, twin_out) = caller(call, False)
            assert (rows, out) == (twin, twin_out)
            (t,) = rows["transfers"]
            assert t[-1] > 0
            assert _stack_functions(rows["stacks"], t[-1])[-7:] == [
                "test_the_twins_record_the_same_call_stacks", caller.__name__, "_helper", "both_paths",
                "<listcomp>", "run_path", "_invoke"]
            leaves.setdefault(caller.__name__, set()).add(rows["stacks"][-1][2:])
        # packed, as under `jaxplace run`: the store's TransferStack row names the same node
        (rows, _), (twin, _) = caller(upload, True)
        assert rows == twin and [n for _, n in rows["transfer_stacks"]] == [rows["stacks"][-1][0]]
    assert leaves["_caller_a"] == leaves["_caller_b"]  # the same leaf frame under both callers


# ---------------------------------------------------------------- the decoder


def _valid_stream():
    rb = _packed.RowBuffer()
    sinks = [rb.sink(i, collections.deque()) for i in range(3)]
    sinks[0].append((7, 123, 45, 2**63 - 1, "jnp", "sin", "cpu:0", 3, (1, 2), 9, "", False, "", (8, 8),
                     ("float32", 4), True))
    sinks[1].append((8, 124, 1, "h2d", "host", "cpu:0", 4, True, False, "multiply (Python scalar)", 3, 0, 7))
    sinks[2].append((10, 7, "cpu:1", (), ("bfloat16", 2), True, 3))
    sinks[0].append((9, -5, 2**80, None, "ünïcode ⚡", ((1,), ())))
    return rb.take()[0]


VALID = _valid_stream() if _packed is not None else b""


def _decode(data: bytes):
    try:
        ops, transfers, buffers = _packed.Decoder().decode(data)
    except (ValueError, OverflowError, MemoryError):  # UnicodeDecodeError is a ValueError
        return None
    assert all(type(r) is tuple for rows in (ops, transfers, buffers) for r in rows)
    return ops, transfers, buffers


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.binary(max_size=256))
def test_the_decoder_takes_arbitrary_bytes(data):
    _decode(data)
    _decode(b"R\x00" + data)  # past the first record's header
    _decode(b"S\x00\x00\x00\x00\x01\x00\x00\x00aR\x00" + data)  # with one string defined


@settings(max_examples=400, deadline=None, derandomize=True)
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255), st.sampled_from("xdi")),
                      min_size=1, max_size=6),
       cut=st.integers(0, 10_000))
def test_the_decoder_takes_damaged_rows(edits, cut):
    data = bytearray(VALID)
    for pos, byte, how in edits:
        pos %= len(data) + 1
        if how == "x" and pos < len(data):
            data[pos] = byte
        elif how == "d" and pos < len(data):
            del data[pos]
        else:
            data.insert(pos, byte)
    _decode(bytes(data))
    _decode(bytes(data[: cut % (len(data) + 1)]))


def test_the_decoder_still_reads_what_was_packed():
    """The fuzz above starts from a stream this decoder reads whole."""
    ops, transfers, buffers = _decode(VALID)
    assert (len(ops), len(transfers), len(buffers)) == (2, 1, 1)
    assert ops[1] == (9, -5, 2**80, None, "ünïcode ⚡", ((1,), ()))


def test_a_list_result_emptied_while_it_is_recorded():
    """Recording calls into Python (here the recorder's ``buffer_id`` for a new input), which
    can change the list a call returned: the C path holds its own copy of the items, as the
    Python path does (before: a borrowed pointer into the list's freed storage)."""

    def rows_of(record_call):
        result = []

        class Meddling(Recorder):
            def buffer_id(self, arr, *rest):
                result.clear()  # the user's list, emptied mid-recording
                return super().buffer_id(arr, *rest)

        def split(x):
            result[:] = [x[:2] + 0, x[2:] + 0]
            return result

        rec = Meddling()
        previous, active.rec = active.rec, rec
        try:
            out = _invoke(record_call, CallSpec("split", OP_JNP), split,
                          (jax.device_put(np.arange(4.0), jax.devices()[2]),), {}, False)
        finally:
            active.rec = previous
        assert out is result and out == []
        rows = rec.take()
        return _without_clock(rows["ops"], (1, 2)), rows["buffers"], rec.recording_errors

    ops, buffers, errors = rows_of(NATIVE)
    assert (ops, buffers, errors) == rows_of(dispatch.python_record_call)
    assert len(ops) == 1 and ops[0][9] == (2, 3) and len(buffers) == 3 and errors == 0


def test_str_and_int_subclasses_cannot_reenter_a_row():
    """A str or int subclass in a row has Python code (``__hash__``, ``__eq__``, ``__str__``)
    that could append another row to the same buffer while this one is half encoded (before:
    the stream came out corrupt, "unknown record"). The encoder copies such values to the
    plain type first: that code never runs, and the row holds the plain value."""
    rb, fallback = _packed.RowBuffer(), collections.deque()
    sink = rb.sink(0, fallback)
    ran = []

    class Name(str):
        def __hash__(self):
            ran.append("hash")
            sink.append((99, "from __hash__"))
            return str.__hash__(self)

        def __eq__(self, other):
            ran.append("eq")
            sink.append((98, "from __eq__"))
            return str.__eq__(self, other)

    class Big(int):
        def __str__(self):
            ran.append("str")
            sink.append((97, "from __str__"))
            return int.__str__(self)

        def __index__(self):
            ran.append("index")
            return 1

    sink.append((1, Name("cpu:0"), Big(7)))
    sink.append((2, Name("cpu:0"), Big(2**70), "cpu:0"))
    data, n_ops, *_ = rb.take()
    ops, transfers, buffers = _packed.Decoder().decode(data)
    assert ops == [(1, "cpu:0", 7), (2, "cpu:0", 2**70, "cpu:0")] and n_ops == 2
    assert [type(v) for v in ops[1]] == [int, str, int, str]
    assert (ran, list(fallback), transfers, buffers) == ([], [], [], [])


_C1 = ("committed", ((4,), "float32", 1))
_U0 = ("uncommitted", ((3,), "int32", 0))
PYTREE_CALLS = [  # jit calls whose operands or results are pytrees of arrays (and scalars)
    ("jit", "nested", [("tuple", [_C1, _C1]), _C1], {}, False),  # a tuple operand
    ("jit", "nested", [("tuple", [_C1, ("scalar", 0.5)]), ("scalar", 2)], {}, False),  # scalar leaves
    ("jit", "as_dict", [_C1, _C1], {}, False),  # a dict of results
    ("jit", "as_dict", [_U0, _U0], {}, False),
    ("jit", "nested", [("tuple", [_C1, _U0]), _C1], {}, False),  # a d2d of one leaf
    # NumPy operands (a data loader's batch): their host legs by inputs.host_leg, in order
    ("jit", "add", [_C1, ("numpy", ((4,), "float32", 0))], {}, False),
    ("jit", "nested", [("tuple", [("numpy", ((4,), "float32", 0)), _C1]), ("numpy", ((), "int32", 0))],
     {}, False),
    ("jit", "as_dict", [("numpy", ((3,), "float64", 0)), ("numpy", ((3,), "float64", 0))], {}, False),
    ("eager", "add", [_C1, ("numpy", ((4,), "float32", 0))], {}, False),
    ("eager", "multiply", [("numpy", ((4,), "int32", 0)), ("scalar", 0.5)], {}, False),
    ("jit", "dict_in", [("dict", [_U0, _C1]), _C1], {}, False),  # a dict operand: its leaves, a d2d
    ("jit", "dict_in", [("dict", [("numpy", ((4,), "float32", 0)), _C1]), ("scalar", 3)], {}, False),
    # nested tuple/list/dict and None, operands and results: flattened by the C code itself
    ("jit", "deep", [("deep", [_C1, _U0, ("numpy", ((3,), "float32", 0))]), ("scalar", 2)], {}, False),
    ("jit", "deep", [("deep", [_C1, ("scalar", 0.5), _C1]), _C1], {}, False),
    # a namedtuple operand: its leaves by jax.tree_util.tree_leaves, still recorded in C
    ("jit", "pair_in", [("named", [_C1, _U0]), _C1], {}, False),
]


@pytest.mark.parametrize("packed", [False, True])
def test_jit_pytrees_are_recorded_in_c_as_in_python(packed):
    """A jit call with a pytree of operands or results (a params dict: every training step) is
    recorded by the C code itself, not handed to dispatch._after_call, and its rows are the
    Python twin's (issue 29: the Python code cost ~25 us a step)."""
    handed = []
    original = dispatch._after_call

    def counted(*args):
        handed.append(args[1].name)
        return original(*args)

    for call in PYTREE_CALLS:
        handed.clear()
        patched_run("_after_call", counted, call, packed)  # C calls `counted` for what it hands over
        assert handed == [], call  # recorded in C
        flattened = []

        def counted_leaves(tree, *args, flattened=flattened, **kwargs):
            flattened.append(tree)
            return jax.tree_util.tree_leaves(tree, *args, **kwargs)

        _, outcome = patched_run("tree_leaves", counted_leaves, call, packed)
        # the C code flattens tuples, lists, str-keyed dicts and None itself (issue 29); a
        # namedtuple (any other registered container) goes to jax.tree_util.tree_leaves, and so
        # does a call that raised (dispatch._record_failure)
        if outcome[0] == "returned":
            assert bool(flattened) == (call[1] == "pair_in"), call
        (native_rows, native_out), (python_rows, python_out) = both_paths(call, packed)
        assert native_out == python_out and native_rows == python_rows, call
        assert native_rows["ops"] and native_rows["recording_errors"] == 0


@pytest.mark.skipif(NATIVE is None, reason="the C hot path is not built")
def test_a_field_a_recorder_subclass_overrides_is_read_through_the_override():
    """The C path reads the recorder's fields at their ``__slots__`` offsets (capture/_native.c
    ``field``) only where the slot is what Python's attribute lookup finds: a subclass whose
    ``transfers`` is a property is read through it, as the Python path reads it, and a plain
    subclass (offsets inherited) lands its rows where the Python path does."""
    reads = []

    class Watched(Recorder):
        @property
        def transfers(self):
            reads.append(1)
            return self.__dict__["_watched"]

        @transfers.setter
        def transfers(self, value):
            self.__dict__["_watched"] = value
            Recorder.transfers.__set__(self, collections.deque())  # a decoy in the shadowed slot

    class Plain(Recorder):
        pass

    def rows_of(record_call, cls):
        rec = cls()
        reads.clear()  # the recorder's own __init__ reads it
        previous, active.rec = active.rec, rec
        try:
            x = jax.device_put(np.arange(4.0, dtype=np.float32), jax.devices()[1])
            _invoke(record_call, CallSpec("add", OP_PRIM, scalar_operands=True), lambda a, b: a + b, (x, 2.0), {}, False)
        finally:
            active.rec = previous
        rows = rec.take()
        return _without_clock(rows["ops"], (1, 2)), _without_clock(rows["transfers"], (1,))

    for cls in (Recorder, Watched, Plain):  # Recorder first: its offsets resolved before the others
        ops, transfers = rows_of(NATIVE, cls)
        assert bool(reads) == (cls is Watched), cls
        assert (ops, transfers) == rows_of(dispatch.python_record_call, cls), cls
        assert len(ops) == 1 and len(transfers) == 1 and transfers[0][6] == 4, (cls, transfers)
    # a class changed after the C path read its offsets (Plain's, just now) is read anew
    Plain.transfers = Watched.transfers
    ops, transfers = rows_of(NATIVE, Plain)
    assert reads and len(transfers) == 1 and (ops, transfers) == rows_of(dispatch.python_record_call, Plain)


def test_the_c_path_reads_sharding_directly_only_behind_the_plain_property():
    """``_sharding`` is read instead of ``Array.sharding`` only where the property is exactly
    ``return self._sharding`` (issue 29: one Python frame a read); a JAX whose property does
    more keeps what it does."""

    class Plain:
        @property
        def sharding(self):
            return self._sharding

    class More:
        @property
        def sharding(self):
            return self._sharding if self._sharding is not None else self._fallback

    class Computed:
        @property
        def sharding(self):
            s = self._sharding
            return s

    class Attribute:
        sharding = None

    assert dispatch._direct_attr("sharding", Plain) == "_sharding"
    assert [dispatch._direct_attr("sharding", c) for c in (More, Computed, Attribute)] == ["sharding"] * 3


def test_committed_is_read_as_jax_stores_it():
    """The C path reads ``_committed`` behind JAX's ``committed`` property only where that is
    ``return self._committed`` (stand-ins, as for ``sharding`` above); what it reads for a real
    array agrees with JAX on a committed and an uncommitted one (device_put with and without a
    device: JAX's documented semantics)."""

    class Plain:
        @property
        def committed(self):
            return self._committed

    class More:
        @property
        def committed(self):
            return bool(self._committed)

    assert dispatch._direct_attr("committed", Plain) == "_committed"
    assert dispatch._direct_attr("committed", More) == "committed"
    attr = dispatch._direct_attr("committed")
    for arr, expected in ((jax.device_put(np.ones(3)), False), (jax.device_put(np.ones(3), jax.devices()[0]), True)):
        assert arr.committed is expected
        assert getattr(arr, attr) is expected


def test_the_thread_state_is_the_python_twins_per_thread_and_goes_with_its_thread():
    """capture/_native.c's ThreadState (state.tls on the native path; record_call writes it
    twice an op) against state.py's threading.local twin: the same attributes and defaults, a
    value per thread, and what a thread left there freed when the thread ends."""
    import gc
    import weakref

    from jaxplace_cli.capture import native
    from jaxplace_cli.capture.jaxhooks.state import _TLS, tls

    if native.module() is None:  # JAXPLACE_CAPTURE=python (make test-python-path): tls is the twin
        pytest.skip("the native path is off in this process")
    assert tls is _native.thread_state()
    names = ("depth", "op", "placer", "collect", "in_device_get", "host_side", "inner")
    twin = _TLS()

    class Held:
        pass

    seen, refs = {}, []

    def thread(state):
        seen[id(state)] = tuple(getattr(state, n) for n in names)  # this thread's: the defaults
        held = Held()
        refs.append(weakref.ref(held))
        state.op, state.placer, state.collect, state.depth, state.inner = (held,), held, [held], 2, True

    for state in (tls, twin):
        state.depth, state.op, state.host_side = 1, ("mine",), True
        try:
            t = threading.Thread(target=thread, args=(state,))
            t.start()
            t.join()
            assert seen[id(state)] == (0, None, None, None, False, False, False), type(state)
            assert (state.depth, state.op, state.host_side, state.inner, state.placer) == (1, ("mine",), True, False, None)
        finally:  # this thread's state is the recorder's: left as it was
            state.depth, state.op, state.host_side = 0, None, False
    del t
    gc.collect()
    assert [r() for r in refs] == [None, None]  # freed with their thread, on both
    with pytest.raises(AttributeError):
        tls.not_a_field = 1
    tls.inner = 1  # a flag stores its truth, as the twin's readers take it
    assert tls.inner is True
    del tls.inner
    assert tls.inner is False
