"""The Array operator/method hooks as a C callable (capture/_wrap.c, issue 29): the same rows
as the Python wrapper it replaces, and the same face as the function it wraps (name, doc,
__wrapped__, signature, binding, pickling, copying, tracebacks without jaxplace's frames).
In-process, real JAX on conftest's simulated CPU devices."""
from __future__ import annotations

import copy
import inspect
import pickle
import sys
import traceback
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from inprocess import recorded
from jax._src.array import ArrayImpl

from jaxplace_cli.capture.jaxhooks import dispatch
from jaxplace_cli.capture.jaxhooks.state import CallSpec
from jaxplace_cli.model.events import OP_METHOD

try:
    from jaxplace_cli.capture import _wrap
except ImportError:  # no C compiler where the package was installed: the Python wrappers run
    _wrap = None

needs_wrap = pytest.mark.skipif(_wrap is None or dispatch._c_wrapper is None,
                                reason="capture/_wrap.c is not built here (or JAXPLACE_CAPTURE=python)")
OWN = "jaxplace_cli"


def double(x, y=1):
    """Twice x, plus y."""
    return 2 * x + y


def _c(fn=double, name="double"):
    w = _wrap.Wrapper(fn, CallSpec(name, OP_METHOD), dispatch.python_record_call)
    import functools

    functools.update_wrapper(w, fn)
    return w


def _program(devs):
    x = jnp.arange(4.0)
    y = jax.device_put(jnp.ones(4), devs[1])
    outs = [x + 1.0, x + x, x * 2, 3.0 - x, -x, abs(x), x.sum(), x.reshape(2, 2), x[1], x[1:3],
            x.astype(jnp.int32), x @ x, x > 1.0, x ** 2, jnp.sin(x), np.float32(2) * x]
    try:
        jax.device_put(x, devs[0]) + y  # committed to two devices: JAX raises, the op is recorded
    except ValueError:
        pass
    z = jax.device_put(jnp.ones(4))  # uncommitted on device 0: moved to y's device
    outs.append(z + y)
    return [np.asarray(o).tolist() for o in outs]


def _rows(rec):
    ops = [(o.kind, o.name, o.devices, o.error[:40], o.backward) for o in rec.ops]
    transfers = [(t.kind, t.src, t.dst, t.bytes, t.api) for t in rec.transfers]
    return ops, transfers


def _python_wrappers():
    """Every C operator/method hook of ArrayImpl swapped for the Python wrapper around the
    same function and spec; the (attr, C wrapper) pairs to put back."""
    swapped = []
    for attr, obj in list(ArrayImpl.__dict__.items()):
        if type(obj).__name__ == "Wrapper":
            setattr(ArrayImpl, attr, dispatch.wrap(obj.__jaxplace_fn__, obj.__jaxplace_spec__))
            swapped.append((attr, obj))
    return swapped


@needs_wrap
def test_the_c_hooks_record_the_rows_the_python_wrappers_record():
    devs = jax.devices()
    with recorded() as c_rec:
        assert type(ArrayImpl.__dict__["__add__"]).__name__ == "Wrapper"
        c_out = _program(devs)
    with recorded() as py_rec:
        swapped = _python_wrappers()
        assert swapped
        try:
            py_out = _program(devs)
        finally:
            for attr, obj in swapped:
                setattr(ArrayImpl, attr, obj)
    plain = _program(devs)
    assert c_out == py_out == plain
    c_ops, c_transfers = _rows(c_rec)
    assert (c_ops, c_transfers) == _rows(py_rec)
    names = [o[1] for o in c_ops]  # counted by hand from _program: every operator is one op
    for name in ("add", "multiply", "subtract", "negative", "sum", "reshape", "getitem", "astype",
                 "matmul", "greater", "power", "sin"):
        assert name in names, name
    assert any(o[3].startswith("ValueError") for o in c_ops)
    assert [t for t in c_transfers if t[0] == "h2d" and t[3] == 4]  # x + 1.0 uploads the 1.0


@needs_wrap
def test_an_installed_hook_looks_like_the_function_it_wraps():
    with recorded():
        for attr in ("__add__", "__radd__", "__getitem__", "sum", "reshape", "__neg__"):
            w = ArrayImpl.__dict__[attr]
            assert type(w).__name__ == "Wrapper", attr
            fn = w.__wrapped__
            assert w.__jaxplace_original__ is fn
            assert (w.__name__, w.__qualname__, w.__doc__, w.__module__) == (
                fn.__name__, fn.__qualname__, fn.__doc__, fn.__module__)
            assert inspect.signature(w) == inspect.signature(fn)
        x = jnp.arange(3.0)
        assert x.sum.__self__ is x and x.sum.__func__ is ArrayImpl.__dict__["sum"]
        assert (x + 1).tolist() == [1.0, 2.0, 3.0]
        assert ArrayImpl.__dict__["__add__"](x, 2.0).tolist() == [2.0, 3.0, 4.0]
        assert ArrayImpl.__dict__["__add__"].__get__(None, ArrayImpl) is ArrayImpl.__dict__["__add__"]
    assert type(ArrayImpl.__dict__["__add__"]).__name__ == "function"  # uninstalled: the original


@needs_wrap
def test_a_wrapper_binds_pickles_and_copies_as_a_function():
    w = _c()
    mod = sys.modules[__name__]
    saved = mod.double
    mod.double = w
    try:
        assert pickle.loads(pickle.dumps(w)) is w  # by reference: module + qualified name
        assert copy.copy(w) is w and copy.deepcopy(w) is w
    finally:
        mod.double = saved
    with pytest.raises(pickle.PicklingError):  # not what its module holds: as for a function
        pickle.dumps(w)

    class Holder:
        method = w

    h = Holder()
    assert Holder.method(3, y=4) == 10  # looked up on the class: the function itself
    assert h.method.__self__ is h and h.method.__func__ is w
    assert w(1, 2) == 4 and w(1, y=0) == 2  # not recording: a plain forward
    assert repr(w) == repr(double)


@needs_wrap
def test_an_error_in_a_hooked_operator_shows_no_jaxplace_frame():
    def user_line():
        return jnp.arange(3.0) + "text"

    with recorded():
        with pytest.raises(TypeError) as info:
            user_line()
        frames = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    assert not [f for f in frames if f"/{OWN}/" in f], frames
    assert any(f.endswith("test_perf_wrap.py") for f in frames)


def test_the_wrapper_type_is_optional():
    """Without the extension (no compiler, JAXPLACE_CAPTURE=python) `wrap` builds the Python
    wrapper for methods too: the same call, a Python function."""
    saved = dispatch._c_wrapper
    dispatch._c_wrapper = None
    try:
        w = dispatch.wrap(double, CallSpec("double", OP_METHOD), method=True)
        assert inspect.isfunction(w) and w.__wrapped__ is double and w(2) == 5
        hook = dispatch.fast_hook(double, double)
        assert hook is double
    finally:
        dispatch._c_wrapper = saved


def test_the_hooks_read_the_trace_jax_reads_outside_and_inside_a_trace():
    """``common._trace_now.value`` (JAX's holder behind ``trace_ctx.trace``, read without the
    property's frame: issue 29) is JAX's current trace wherever a hook asks: at top level (the
    eval trace: record) and while ``jax.jit`` traces a function (not: no op is dispatched)."""
    from jax._src import core

    from jaxplace_cli.capture.jaxhooks import common

    seen = []

    def f(x):
        seen.append((common._trace_now.value, core.trace_ctx.trace,
                     common._CurrentTrace().value))  # the fallback reads the property itself
        return x + 1

    top = (common._trace_now.value, core.trace_ctx.trace, common._CurrentTrace().value)
    jax.jit(f)(jnp.ones(2))
    assert top[0] is top[1] is top[2] and type(top[0]) is core.EvalTrace
    (inside,) = seen
    assert inside[0] is inside[1] is inside[2] and type(inside[0]) is not core.EvalTrace


def _as_class_attributes():
    """What each function does looked up through a class (``self.act(x)``), as under python:
    ``jax.nn.relu`` (a ``custom_jvp``) does not bind, ``jnp.sin`` (a ``PjitFunction``) and
    ``jnp.where`` (a Python function) do, so the instance becomes their first argument."""

    class M:
        relu, sin, where = jax.nn.relu, jnp.sin, jnp.where

    out = {}
    for name in ("relu", "sin", "where"):
        try:
            out[name] = ("returned", np.asarray(getattr(M(), name)(jnp.arange(3.0) - 1)).tolist())
        except TypeError as exc:
            out[name] = ("raised", type(exc).__name__)
    return out


@pytest.mark.parametrize("c_wrappers", [True, False])
def test_a_hooked_function_binds_exactly_when_the_original_does(c_wrappers, monkeypatch):
    """A library function kept as a class attribute behaves as under python: a wrapper binds as
    a method only where the function it wraps does (``M().act(x)`` with ``act = jax.nn.relu``
    raised TypeError under jaxplace: the wrapper bound the instance as relu's argument)."""
    from jaxplace_cli.capture import recording

    plain = _as_class_attributes()
    assert plain["relu"] == ("returned", [0.0, 0.0, 1.0])
    assert plain["sin"][0] == plain["where"][0] == "raised"
    if not c_wrappers:
        monkeypatch.setattr(dispatch, "_c_wrapper", None)
    assert not recording._installed  # the hooks are installed (so wrapped) inside recorded()
    with recorded() as rec:
        kinds = {type(f).__name__ for f in (jax.nn.relu, jnp.sin)}
        assert kinds == ({"PlainWrapper", "Wrapper"} if c_wrappers and _wrap is not None
                         else {"_Unbound", "function"})
        assert _as_class_attributes() == plain
        assert jax.nn.relu(jnp.ones(2)).tolist() == [1.0, 1.0]
    assert "relu" in [o.name.split(".")[-1] for o in rec.ops]


def _jit_program(devs):
    """jax.jit functions made and called inside the recording: Python scalars, NumPy data, a
    keyword, a static argument, arrays on two devices, a jitted method, a failing call."""
    import functools

    def scale(x, s, *, bias=0.0):
        return x * s + bias

    f = jax.jit(scale)
    g = jax.jit(lambda x, n: x ** n, static_argnums=1)
    h = jax.jit(lambda a, b: a + b)

    class Model:
        @functools.partial(jax.jit, static_argnums=0)
        def step(self, x):
            return x + 1

    class Lazy:  # read inside jnp.asarray's op (tls.depth 1): g's NumPy argument is a leg of it
        def __jax_array__(self):
            return g(np.full(3, 2.0, np.float32), 3)

    outs = [f(jnp.arange(3.0), 2.0), f(np.ones(3, np.float32), 3.0, bias=1.0), g(jnp.arange(3.0), 2),
            f(jax.device_put(jnp.ones(3), devs[1]), 2.0),
            h(jnp.ones(3), jax.device_put(jnp.ones(3), devs[2])),  # the uncommitted one moves
            Model().step(jnp.ones(2)), jnp.asarray(Lazy())]
    try:
        f(jnp.ones(3), "text")
    except TypeError:
        pass
    return [type(f).__module__, type(h).__module__] + [np.asarray(o).tolist() for o in outs]


def _jit_rows(rec):
    where = {s.id: (s.file.rsplit("/", 1)[-1], s.line) for s in rec.sites}
    ops = [(o.kind, o.name, o.devices, o.error[:40], where[o.site]) for o in rec.ops]
    transfers = [(t.kind, t.src, t.dst, t.bytes, t.api, t.implicit, t.blocking, where.get(t.site))
                 for t in rec.transfers]
    return ops, transfers


@needs_wrap
def test_a_jit_call_in_c_records_the_rows_the_python_jit_function_records(monkeypatch):
    """``jax.jit`` under the hooks returns capture/_wrap.c's JitFunction (no Python frame a call:
    bench/README.md round 16): the same ops and legs, at the same lines, as the Python class."""
    devs = jax.devices()
    with recorded() as c_rec:
        c_out = _jit_program(devs)
    with recorded() as py_rec:
        monkeypatch.setattr(dispatch, "c_jit_function", None)
        py_out = _jit_program(devs)
    assert c_out[:2] == ["jaxplace_cli.capture._wrap"] * 2, c_out[:2]
    assert py_out[:2] == ["jaxplace_cli.capture.jaxhooks.jit"] * 2, py_out[:2]
    assert c_out[2:] == py_out[2:]
    c_ops, c_transfers = _jit_rows(c_rec)
    assert (c_ops, c_transfers) == _jit_rows(py_rec)
    jit_ops = [o for o in c_ops if o[0] == "jit"]  # 7 calls by hand: 6 that ran, 1 that raised
    assert len(jit_ops) == 7 and all(o[4][0] == "test_perf_wrap.py" for o in jit_ops), jit_ops
    inner = [t for t in c_transfers if t[0] == "h2d" and t[4] == "jnp.asarray (host data)"]
    assert [t[3] for t in inner] == [12], c_transfers  # g's float32[3] inside the op: depth 1, in C
    assert sum(1 for o in jit_ops if o[3].startswith("TypeError")) == 1
    scalars = [t for t in c_transfers if t[4] == "jit(scale) (Python scalar)"]
    assert [t[3] for t in scalars] == [4, 4, 4, 4], c_transfers  # s of 3 calls that ran, and bias=1.0


@needs_wrap
def test_a_jit_function_in_c_looks_copies_and_pickles_as_the_jitted_function():
    def scale(x, s=2.0):
        """Scaled."""
        return x * s

    with recorded():
        jf = jax.jit(scale)
        donating = jax.jit(scale, donate_argnums=0)
        with pytest.raises(TypeError) as info:
            jf(jnp.ones(2), "text")
    frames = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    assert not [f for f in frames if f"/{OWN}/" in f], frames
    assert (type(jf).__name__, type(jf).__module__) == ("JitFunction", "jaxplace_cli.capture._wrap")
    assert type(donating).__module__ == "jaxplace_cli.capture.jaxhooks.jit"  # its frees are recorded around it
    assert (jf.__wrapped__, jf.__name__, jf.__doc__) == (scale, "scale", "Scaled.")
    assert inspect.signature(jf) == inspect.signature(scale)
    rebuild, (jitted,) = jf.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    assert type(jitted).__name__ == "PjitFunction" and jitted.__wrapped__ is scale and rebuild(jitted) is jitted
    assert jf.__reduce__() == (rebuild, (jitted,)) and repr(jf) == repr(jitted)
    assert copy.copy(jf) is jitted and jf.__getstate__().keys() == jitted.__getstate__().keys()
    try:
        pickle.dumps(jax.jit(scale))
    except Exception as exc:  # a jitted function of a local function does not pickle
        refused = type(exc)
    with pytest.raises(refused):  # nor does the hook: the same error
        pickle.dumps(jf)
    assert jf.lower(jnp.ones(2)).as_text() == jax.jit(scale).lower(jnp.ones(2)).as_text()
    assert jf(jnp.ones(2)).tolist() == [2.0, 2.0]  # not recording: a plain forward
    assert jf._cache_size() == jitted._cache_size() == 1  # the rest of its API is the jitted function's

    class Holder:
        method = jf

    assert Holder.method(jnp.ones(2)).tolist() == [2.0, 2.0]  # looked up on the class: itself
    bound = Holder().method
    assert bound.__func__ is jf and inspect.ismethod(bound)
    assert weakref.ref(jf)() is jf


def _direct_ufuncs(x, y, z):
    """jax.numpy's ufuncs called directly (not through an operator), by hand: 5 ops; legs:
    add's 1.0 (h2d, 4 bytes), add's float32[4] from NumPy (h2d, 16), subtract's 3.0 (h2d, 4)
    and the uncommitted z moved to y's device (d2d, 16)."""
    outs = [jnp.add(x, 1.0), jnp.multiply(x, x), jnp.add(x, np.ones(4, np.float32)),
            jnp.subtract(3.0, x), jnp.add(z, y)]
    return outs


@pytest.mark.skipif(dispatch.record_call is dispatch.python_record_call, reason="the C hot path is not built")
def test_a_direct_ufunc_call_is_recorded_in_c(monkeypatch):
    """``jnp.add(x, y)`` passes the ufunc hook, which hands record_call the bound ufunc and the
    operands alone: the C code records it. With the ufunc itself among the arguments every such
    call went to the Python rows (dispatch._after_call; the cost: bench/README.md round 19)."""
    from jaxplace_cli.capture import native
    from jaxplace_cli.capture.jaxhooks.state import active

    monkeypatch.setattr(active, "placing", False)  # a policy of an earlier test: all in Python
    handed = []
    original = dispatch._after_call

    def counted(*args):
        handed.append(args[1].name)
        return original(*args)

    x = jnp.arange(4.0)
    y = jax.device_put(jnp.ones(4), jax.devices()[1])
    z = jax.device_put(jnp.ones(4))
    monkeypatch.setattr(dispatch, "_after_call", counted)
    dispatch.configure_native(native.module())
    try:
        with recorded() as rec:
            out = _direct_ufuncs(x, y, z)
    finally:
        monkeypatch.undo()
        dispatch.configure_native(native.module())
    assert [np.asarray(o).tolist() for o in out] == [[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 4.0, 9.0], [1.0, 2.0, 3.0, 4.0],
                   [3.0, 2.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0]]
    assert handed == []  # every call recorded in C
    ops = [(o.name, o.devices) for o in rec.ops if o.name in ("add", "multiply", "subtract")]
    assert ops == [("add", "cpu:0"), ("multiply", "cpu:0"), ("add", "cpu:0"), ("subtract", "cpu:0"),
                   ("add", "cpu:1")], ops
    legs = [(t.kind, t.src, t.dst, t.bytes) for t in rec.transfers]
    assert legs == [("h2d", "host", "cpu:0", 4), ("h2d", "host", "cpu:0", 16), ("h2d", "host", "cpu:0", 4),
                    ("d2d", "cpu:0", "cpu:1", 16)], legs


@needs_wrap
def test_jaxs_inner_jitted_helpers_decide_in_c_and_count_the_legs_the_guard_logs():
    """``jax._src``'s jitted helpers are ``capture/_wrap.c``'s ``InnerJit`` while recording: a
    call with no host value among its arguments (``x.sum()``'s ``_reduce_sum``: keywords, all
    static or None) goes straight to JAX, and one whose host values are positional Python
    scalars (``jnp.where``'s ``_where(c, x, 0.0)``) is recorded in C; only NumPy data and the
    like enter ``legs.inner_call`` (the cost of entering it: bench/README.md round 20). Legs by
    hand, as ``JAX_TRANSFER_GUARD=log`` logs them: ``x > 1.0``'s 1.0 (4 bytes), ``jnp.where``'s
    0.0 (4) and ``jnp.sum``'s float32[3] from NumPy (12)."""
    from jax._src.numpy import reductions, util

    from jaxplace_cli.capture.jaxhooks import legs

    entered = []

    def counted(fn, *args):
        entered.append(fn.__name__)
        return legs.inner_call(fn, *args)

    x = jnp.arange(4.0)
    dispatch.configure_wrap(counted)
    try:
        with recorded() as rec:
            assert type(util._where).__name__ == type(reductions._reduce_sum).__name__ == "InnerJit"
            quiet = [x.sum(), jnp.mean(x), x.max(), jnp.argmax(x), jnp.cumsum(x), jnp.sum(x, axis=0)]
            assert entered == []
            loud = [jnp.where(x > 1.0, x, 0.0), jnp.sum(np.ones(3, np.float32))]
    finally:
        dispatch.configure_wrap()
    assert entered == ["_reduce_sum"]
    assert [np.asarray(o).tolist() for o in quiet + loud] == [6.0, 1.5, 3.0, 3, [0.0, 1.0, 3.0, 6.0], 6.0,
                                                              [0.0, 0.0, 2.0, 3.0], 3.0]
    legs_ = [(t.kind, t.dst, t.bytes, t.api) for t in rec.transfers]
    assert legs_ == [("h2d", "cpu:0", 4, "x > y (Python scalar)"), ("h2d", "cpu:0", 4, "jnp.where (Python scalar)"),
                     ("h2d", "cpu:0", 12, "jnp.sum (numpy argument)")], legs_


def _where_user(c, x):
    return jnp.where(c, x, 0.0)  # an inner dispatch's scalar two user frames deep: a stack node


def _rows_and_stacks(program):
    from jaxplace_cli.capture.recorder import Recorder
    from jaxplace_cli.capture.recording import Recording

    rec = Recorder()
    recording = Recording(rec, "all")
    recording.start()
    try:
        out = program()
    finally:
        recording.stop()
    rows = rec.drain()
    op_index = {o[0]: i for i, o in enumerate(rows["ops"])}
    stacks = dict(rows["transfer_stacks"])
    return out, [(*t[3:12], op_index.get(t[12]), stacks.get(t[0], 0)) for t in rows["transfers"]]


@needs_wrap
@pytest.mark.skipif(dispatch.record_call is dispatch.python_record_call, reason="the C hot path is not built")
def test_an_inner_dispatchs_scalar_legs_in_c_are_the_python_rows():
    """``_native.inner_legs`` makes the rows ``legs.record_inner`` makes (kind, devices, bytes,
    label, site, op, stack node), for positional Python scalars of every kind, on another
    device and two user frames deep; NumPy data stays with the Python (the same rows too).
    A KeyboardInterrupt while a leg is recorded reaches the user, as from the Python path."""
    def program():  # its own arrays: a buffer's id is the first recorder's that sees it
        x = jnp.arange(4.0)
        y = jax.device_put(jnp.arange(4.0), jax.devices()[1])
        c = x > 1.0
        return [jnp.where(c, x, 0.0), jnp.where(c, x, 2), jnp.where(c, y, 1.5), jnp.clip(x, 0.0, 1.0),
                _where_user(c, x), jnp.where(c, x, np.float32(3.0)), jnp.where(c, x, np.ones(4, np.float32)),
                jnp.where(c, x, x)]

    from jaxplace_cli.capture.jaxhooks import legs

    python_legs = []

    def counted(hosts, out):
        python_legs.append(type(hosts[0]).__name__)
        return record_inner(hosts, out)

    record_inner = legs.record_inner
    try:
        dispatch.configure_wrap(c_legs=False)
        py_out, py_rows = _rows_and_stacks(program)
        dispatch.configure_wrap()
        c_out, c_rows = _rows_and_stacks(program)
        legs.record_inner = counted  # what the C path falls back to, and the Python inner_call's
        dispatch.configure_wrap()  # (a run of its own: the test's frame would be in the stacks)
        _rows_and_stacks(program)
    finally:
        legs.record_inner = record_inner
        dispatch.configure_wrap()
    assert python_legs == ["float32", "ndarray"]  # the Python scalars' rows were made in C
    assert [np.asarray(o).tolist() for o in c_out] == [np.asarray(o).tolist() for o in py_out]
    assert c_rows == py_rows
    legs_ = [(r[0], r[2], r[3], r[6]) for r in c_rows if r[0] == "h2d" and r[6].startswith(("jnp.where", "jnp.clip"))]
    assert legs_ == [("h2d", "cpu:0", 4, "jnp.where (Python scalar)"), ("h2d", "cpu:0", 4, "jnp.where (Python scalar)"),
                     ("h2d", "cpu:1", 4, "jnp.where (Python scalar)"), ("h2d", "cpu:0", 4, "jnp.clip (Python scalar)"),
                     ("h2d", "cpu:0", 4, "jnp.clip (Python scalar)"), ("h2d", "cpu:0", 4, "jnp.where (Python scalar)"),
                     ("h2d", "cpu:0", 4, "jnp.where (numpy argument)"),
                     ("h2d", "cpu:0", 16, "jnp.where (numpy argument)")], legs_
    assert [r[-1] != 0 for r in c_rows if r[0] == "h2d" and r[6].startswith("jnp.where")][3]  # _where_user's stack

    from jaxplace_cli.capture.recorder import Recorder
    from jaxplace_cli.capture.recording import Recording

    def interrupted(ev, frame):  # a Ctrl-C that lands while the leg's stack is looked up
        raise KeyboardInterrupt

    rec = Recorder()
    rec.with_stack = interrupted
    recording = Recording(rec, "all")
    x = jnp.arange(4.0)
    c = x > 1.0
    recording.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            jnp.where(c, x, 0.0)
    finally:
        recording.stop()
