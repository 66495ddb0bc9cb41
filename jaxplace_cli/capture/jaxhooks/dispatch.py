"""Dispatch hooks: one wrapper around every Python entry point that can launch device work.

Why wrappers and not ``core.EvalTrace.process_primitive``: ``jax.numpy`` functions and user
``jit`` functions dispatch through the C++ fast path, which never re-enters Python on a cache
hit. Forcing the slow path costs ~x1.44; a thin wrapper around the *public* entry points
(``jax.jit``, ``jax.numpy.*``, Array operators and methods, ...) costs a few microseconds per op,
sees the caller's frame, and keeps the fast path. Primitives bound eagerly outside any wrapper
(``lax.*``, ``jax.grad`` outside jit) are caught by a hook on ``EvalTrace.process_primitive``.

A wrapper records only when it is the outermost hooked call on its thread, JAX is not tracing,
and the call produced a jax.Array not among its inputs (``jnp.asarray(array)``: no op) or was a jit call."""
from __future__ import annotations

import functools
import sys
from threading import get_ident as _thread_ident
from time import perf_counter_ns

import jax
import numpy as np
from jax._src.array import ArrayImpl
from jax.tree_util import tree_leaves

from jaxplace_cli.capture import frames
from jaxplace_cli.capture.jaxhooks import inputs, legs, syncs
from jaxplace_cli.capture.jaxhooks.common import (
    _SCALAR_BYTES,
    _direct_attr,
    _EvalTrace,
    _trace_now,
    _Unbound,
    _unwrapped,
    _x64_now,
    array_nbytes,
    pass_on,
    x64_enabled,
)
from jaxplace_cli.capture.jaxhooks.indexing import index_uploads
from jaxplace_cli.capture.jaxhooks.state import (  # noqa: F401 - CallSpec is imported from here
    _LABELS,
    HOST_DATA_TYPES,
    PY_SCALARS,
    CallSpec,
    active,
    endpoint_label,
    foreign_operand,
    sharding_label,
    static_positions,
    tls,
)
from jaxplace_cli.capture.memory import is_oom, on_oom, peek_seq
from jaxplace_cli.capture.recorder import _DTYPE_NAMES, BUF_ATTR, dtype_name
from jaxplace_cli.model.events import D2D, H2D, HOST, OP_JIT, OpEvent

_Array, _SEQUENCES = jax.Array, (list, tuple)
def _operand_leaves(spec: CallSpec, args, kwargs):
    if spec.static_argnums or spec.static_argnames:  # compile-time constants: never uploaded
        static = static_positions(spec.static_argnums, len(args))
        args = [a for i, a in enumerate(args) if i not in static]
        kwargs = {k: v for k, v in kwargs.items() if k not in spec.static_argnames}
    if spec.flatten:
        return tree_leaves((args, kwargs))
    leaves = []
    for a in (*args, *kwargs.values()) if kwargs else args:
        if type(a) in _SEQUENCES:
            leaves.extend(a)
        else:
            leaves.append(a)
    return leaves


def _out_arrays(out, flatten: bool):
    if type(out) is ArrayImpl:
        return (out,)
    if flatten or type(out) in _SEQUENCES:
        return [o for o in tree_leaves(out) if isinstance(o, _Array)]
    if isinstance(out, _Array):
        return (out,)
    return ()


def python_record_call(spec: CallSpec, fn, args, kwargs, backward: bool = False):
    """Run ``fn`` as a recorded op: site, timing, devices, buffers, implicit transfers.

    With a placement policy active (``device_placement`` on this thread, else ``--policy``), the placer first decides
    the device, moves the arguments there (recording those moves), may wrap ``fn`` to make array-less ops there.
    The hot path of every eager op on the pure-Python path (measured in-process on the 2-core reference machine:
    ~7 us on ``jnp.sin(x)``, ~14 us on ``x * 0.5`` with its scalar upload; bench/README.md): written flat on
    purpose, and it leaves ~1.7 GC-tracked objects per eager op (was 4.7: every tracked allocation brings the
    next collection, and JAX's gc callback, closer)."""
    rec = active.rec
    try:
        site = rec.site_of(sys._getframe(1))
        seq = next(rec.seqs)
        if spec.foreign is not None and foreign_operand(args):  # legs of what JAX converts: inside
            spec = spec.foreign
    except Exception as exc:  # the recording failed, not the call: run it unrecorded
        rec.recording_failed(exc)
        return fn(*args, **kwargs)
    placed = ""
    if active.placing and not spec.placed_by_jax:  # a policy's own errors (PolicyError) stand
        placer = tls.placer or active.placer
        if placer is not None:
            fn, args, kwargs, placed = placer.place(rec, spec, fn, args, kwargs, site, seq, backward)
    tls.depth = spec.depth
    tls.op = (spec.name, seq, site, args, kwargs, spec.api, spec)
    t0 = perf_counter_ns()
    try:
        out = fn(*args, **kwargs)
    except BaseException as exc:
        t1 = perf_counter_ns()
        tls.depth = 0
        tls.op = None
        _record_failure(rec, spec, args, kwargs, seq, site, t0, t1, exc)
        raise
    t1 = perf_counter_ns()
    tls.depth = 0
    tls.op = None
    try:  # a recording failure here must not lose the user's result: counted, said at the end
        mark = peek_seq(rec.buf_ids) if spec.kind == OP_JIT else None  # a program (syncs.program)
        _after_call(rec, spec, fn, args, kwargs, out, site, seq, t0, t1, placed, backward)
        if mark is not None:
            syncs.program(rec, mark)
        b = rec.backlog_limit
        if b is not None and len(rec.ops) + len(rec.transfers) + len(rec.buffers) > b:
            rec.wait_for_writer()  # back-pressure (Recorder.wait_for_writer)
    except Exception as exc:
        rec.recording_failed(exc)
    return out


python_record_call.__code__ = frames.shimmed(python_record_call.__code__)  # as wrap's wrapper


def _after_call(rec, spec: CallSpec, fn, args, kwargs, out, site: int, seq: int, t0: int, t1: int,
                placed: str, backward: bool) -> None:  # noqa: C901
    # long: every eager op passes here; the operand and result loops are inlined on purpose
    # (a helper call per operand cost ~0.4 us per op, P2 in bench/README.md)
    """The rows of one finished call (the native hot path calls it for the cases it leaves to
    Python: capture/_native.c); ``out`` is what ``fn`` returned."""
    if type(out) is ArrayImpl:
        if args and out is args[0]:
            return  # jnp.asarray(array) and friends: nothing was dispatched
        outs = (out,)
    else:
        outs = _out_arrays(out, spec.flatten)
        if not outs or (args and outs[0] is args[0]):
            if not outs and spec.flatten:  # a jit call that returned no array (inputs.py)
                inputs.resultless(rec, spec, fn, args, kwargs, _operand_leaves(spec, args, kwargs), site, seq, t0, t1, backward, placed)
            return
    # device of the op = device of its (first) result
    sh = outs[0].sharding
    d = getattr(sh, "_device", None)
    dev = _LABELS.get(d) if d is not None else None
    if dev is None:
        dev = sharding_label(sh)
    base = rec.t0
    tid = _thread_ident()
    in_bufs = []
    leaves = args
    if spec.flatten or kwargs or spec.static_argnums:
        leaves = _operand_leaves(spec, args, kwargs)
    else:
        for a in args:  # a plain loop: a generator in any() costs ~1 us per op here
            if type(a) in _SEQUENCES:  # jnp.stack([a, b]) and friends
                leaves = _operand_leaves(spec, args, kwargs)
                break
    transfers = rec.transfers
    on_transfer = rec.on_transfer  # set while a trace window is open (TraceAnnotations)
    scalar_bytes = None
    stack = -1  # the call's stack node (capture/stacks.py), looked up with its first transfer
    if spec.index and (n := index_uploads(args, dev)) is not None:
        scalar_bytes = _SCALAR_BYTES[x64_enabled()]
        for _ in range(n):
            if stack < 0:
                stack = rec.stack_of(sys._getframe(1))
            ev = (next(rec.seqs), t0 - base, tid, H2D, HOST, dev, scalar_bytes[int], True, False,
                  spec.scalar_api, site, 0, seq, stack)
            transfers.append(ev)
            if on_transfer is not None:
                on_transfer(ev)
        leaves = [a for a in leaves if type(a) not in PY_SCALARS and not isinstance(a, np.integer)]  # counted above
    dropped = legs.dropped_leaves(fn, spec, args, kwargs) if spec.flatten else legs.NOTHING_DROPPED
    for i, a in enumerate(leaves):
        ta = type(a)
        if ta is ArrayImpl or isinstance(a, _Array):
            ash = a.sharding
            ad = getattr(ash, "_device", None)
            adev = _LABELS.get(ad) if ad is not None else None
            if adev is None:
                adev = sharding_label(ash)
            ad_dict = getattr(a, "__dict__", None)
            b = ad_dict.get(BUF_ATTR) if ad_dict is not None else None
            if b is None:
                b = rec.buffer_id(a, adev, getattr(a, "_committed", True), site, seq)
            in_bufs.append(b)
            if i in dropped:
                continue  # an argument the compiled program dropped: never moved
            if adev != dev and "," not in dev and "," not in adev:
                committed = getattr(a, "_committed", True)
                api = spec.api + (" (uncommitted input)" if not committed else "")
                if stack < 0:
                    stack = rec.stack_of(sys._getframe(1))
                ev = (next(rec.seqs), t0 - base, tid, D2D, adev, dev, array_nbytes(a), True, False,
                      api, site, b, seq, stack)
                transfers.append(ev)
                if on_transfer is not None:
                    on_transfer(ev)
            elif adev != dev and "," in dev and "," not in adev:
                # a one-device array in a multi-device dispatch: JAX puts it on every device of
                # the computation, a leg each (onto its own device too: the guard logs it)
                for dst, nbytes in legs.destinations(outs[0], a, array_nbytes(a)):
                    if stack < 0:
                        stack = rec.stack_of(sys._getframe(1))
                    ev = (next(rec.seqs), t0 - base, tid, D2D, adev, dst, nbytes, True, False,
                          spec.api, site, b, seq, stack)
                    transfers.append(ev)
                    if on_transfer is not None:
                        on_transfer(ev)
        elif not spec.scalars or i in dropped:
            continue  # a plain function: its dispatches inside count their own (legs.py); dropped: never uploaded
        elif ta in PY_SCALARS and "," not in dev:  # x + 1.0 uploads the 1.0 (jax-facts 7)
            if scalar_bytes is None:
                scalar_bytes = _SCALAR_BYTES[x64_enabled()]
            if stack < 0:
                stack = rec.stack_of(sys._getframe(1))
            ev = (next(rec.seqs), t0 - base, tid, H2D, HOST, dev, scalar_bytes[ta], True, False,
                  spec.scalar_api, site, 0, seq, stack)
            transfers.append(ev)
            if on_transfer is not None:
                on_transfer(ev)
        else:  # host data: one leg per device the dispatch runs on (inputs.host_leg)
            stack = inputs.host_leg(rec, spec, fn, args, kwargs, a, dev, outs[0], site, seq, t0 - base, tid,
                                  stack, leaves, sys._getframe(1))
    # A plain tuple in OpEvent's field order, not an OpEvent: CPython's GC stops tracking exact
    # tuples of atoms, not NamedTuples, and a backlog of tracked events slowed every collection in
    # the user's program. One buffer id is an int, not a 1-tuple: one object less for the GC.
    in_ids = in_bufs[0] if len(in_bufs) == 1 else tuple(in_bufs)
    if len(outs) == 1:
        o = outs[0]
        od = getattr(o, "__dict__", None)
        b = od.get(BUF_ATTR, 0) if od is not None else 0
        if b == 0 and od is not None:
            # A new array: its BufferEvent rides in the op's row (three more fields; split off
            # by store/rows.py; the row shape is model/raw.py) — one tuple per op instead of two, and no call.
            b = od[BUF_ATTR] = next(rec.buf_ids)
            rec.tail[dev] = b  # the newest work queued on dev (syncs.py)
            rec.track(o, b, site, dev)
            aval = o.aval
            dtype = aval.dtype
            name = _DTYPE_NAMES.get(dtype) or dtype_name(dtype)
            rec.ops.append((seq, t0 - base, t1 - t0, tid, spec.kind, spec.name, dev,
                            site, in_ids, b, "", backward, placed,
                            aval.shape, name, getattr(o, "_committed", True)))
        else:
            rec.ops.append((seq, t0 - base, t1 - t0, tid, spec.kind, spec.name, dev,
                            site, in_ids, b, "", backward, placed))
    else:  # a pytree of results (jit calls): Recorder.buffer_id, inlined (~1 us per result)
        out_bufs = []
        buffers = rec.buffers
        odev = dev
        for o in outs:
            od = getattr(o, "__dict__", None)
            b = od.get(BUF_ATTR) if od is not None else 0
            if b is None:
                b = od[BUF_ATTR] = next(rec.buf_ids)
                if odev is dev:
                    rec.tail[dev] = b  # the newest work queued on dev (syncs.py)
                if odev is None:
                    osh = o.sharding
                    d = getattr(osh, "_device", None)
                    odev = _LABELS.get(d) if d is not None else None
                    if odev is None:
                        odev = sharding_label(osh)
                aval = o.aval
                dtype = aval.dtype
                name = _DTYPE_NAMES.get(dtype) or dtype_name(dtype)
                buffers.append((b, seq, odev, aval.shape, name, getattr(o, "_committed", True), site))
                rec.track(o, b, site, odev)
            out_bufs.append(b)
            odev = None  # the first result's device is the op's; the others are looked up
        out_bufs = tuple(out_bufs)
        rec.ops.append((seq, t0 - base, t1 - t0, tid, spec.kind, spec.name, dev, site,
                        in_ids, out_bufs, "", backward, placed))
    if active.on_dispatch is not None:
        active.on_dispatch()


def _record_failure(rec, spec, args, kwargs, seq, site, t0, t1, exc):
    """A call that raised is still an event: audit explains device errors from it."""
    try:
        devs, bufs = [], []
        for a in _operand_leaves(spec, args, kwargs):
            if isinstance(a, _Array):
                adev = sharding_label(a.sharding)
                devs.append(adev)
                bufs.append(rec.buffer_id(a, adev, getattr(a, "_committed", True), site, seq))
        msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        rec.ops.append(OpEvent(seq, t0 - rec.t0, t1 - t0, _thread_ident(), spec.kind, spec.name,
                               ",".join(dict.fromkeys(devs)), site,
                               ",".join(map(str, bufs)), "", msg[:2000], False, ""))
        if is_oom(exc):  # RESOURCE_EXHAUSTED: recorded, and what filled the device said (issue 27)
            on_oom(rec, devs, kwargs, site, exc)
    except Exception as err:  # recording must never mask the user's exception
        rec.recording_failed(err)


def wrap(fn, spec: CallSpec, method: bool = False):
    """A recording wrapper around ``fn`` (a plain function or a jitted function).

    ``method``: an Array operator or method. Those are the per-op cost of eager code (every
    ``x + 1.0``), so where the extension loaded the wrapper is ``capture/_wrap.c``'s
    ``Wrapper``, the same decisions without a Python frame (issue 29) — and so it is for a
    jitted ``jax.numpy`` function (``jnp.sin``: a ``PjitFunction``, which is no Python function
    either) and a ``custom_jvp``/``custom_vjp`` one (``jax.nn.relu``). A Python function keeps a
    Python wrapper (``inspect.isfunction`` stays true). The wrapper binds as a method exactly
    when ``fn`` does: ``class M: act = jax.nn.relu`` then ``M().act(x)`` calls ``relu(x)``."""
    # the native path counts an index's Python ints; x[idx] needs index_uploads (Python)
    call = python_record_call if spec.index else None
    static = legs.jit_static(fn)  # a jitted function: its host arguments are uploads
    binds = hasattr(type(fn), "__get__")
    if _c_wrapper is not None and (method or type(fn).__name__ in _C_WRAPPED):
        wrapper = (_c_wrapper if binds else _c_plain_wrapper)(fn, spec, call or record_call, static)
        functools.update_wrapper(wrapper, fn)
        wrapper.__jaxplace_original__ = fn
        return wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            if active.rec is None or type(_trace_now.value) is not _EvalTrace:
                return fn(*args, **kwargs)
            if tls.depth:  # inside another recorded op: a jitted one adds its legs to it
                return legs.inner_call(fn, args, kwargs, *static) if static else fn(*args, **kwargs)
            return (call or record_call)(spec, fn, args, kwargs)
        except Exception as exc:
            frames.drop_own(exc)
            raise

    wrapper.__code__ = frames.shimmed(wrapper.__code__)  # warnings skip it: they name the user's line
    wrapper.__jaxplace_original__ = fn
    return pass_on(wrapper, fn) if binds else _Unbound(wrapper, fn)


# callables wrapped by the C Wrapper besides Array methods: no Python function to imitate
_C_WRAPPED = ("PjitFunction", "custom_jvp", "custom_vjp")


def fast_hook(original, hook):
    """``hook`` (a Python hook around the method ``original``, e.g. ``ufunc.__call__``) behind a
    ``capture/_wrap.c`` ``Wrapper`` that calls ``original`` itself where the hook would only forward
    (not recording, tracing, inside an op at ``tls.depth`` 2: every ``x * y``); else ``hook``."""
    if _c_wrapper is None:
        return hook
    wrapper = functools.update_wrapper(_c_wrapper(original, None, python_record_call, None, hook), hook)
    wrapper.__jaxplace_original__ = original
    return wrapper


def configure_native(mod):
    """``mod.record_call`` (the C hot path, capture/_native.c) wired to this module's objects:
    the rows it appends are this module's. Separate from the choice of path so that a test can
    drive both twins in one process (tests/test_native_twin.py)."""
    mod.configure(active=active, tls=tls, labels=_LABELS, array_type=ArrayImpl,
                  dtype_names=_DTYPE_NAMES, dtype_name=dtype_name,
                  sharding_label=sharding_label, array_nbytes=array_nbytes, x64_enabled=x64_enabled,
                  py_record_call=python_record_call, after_call=_after_call,
                  record_failure=_record_failure, scalar_bytes=_SCALAR_BYTES, buf_attr=BUF_ATTR,
                  d2d=D2D, h2d=H2D, host=HOST, tree_leaves=tree_leaves, host_leg=inputs.host_leg,
                  dropped_leaves=legs.dropped_leaves, host_types=(np.ndarray, np.generic),
                  sharding_attr=_direct_attr("sharding"), x64_now=_x64_now, committed_attr=_direct_attr("committed"),
                  suffix=legs.suffix, program=syncs.program)
    return mod.record_call


def _native_record_call():
    """The native hot path, or None (no extension, a failed import, ``JAXPLACE_CAPTURE=python``)."""
    from jaxplace_cli.capture import native
    return configure_native(mod) if (mod := native.module()) is not None else None


# What every hook calls: the native function when it loaded, else the Python one (same rows).
record_call = _native_record_call() or python_record_call


def configure_wrap(inner_call=legs.inner_call, c_legs: bool = True):
    """``capture/_wrap.c``'s ``Wrapper``, ``PlainWrapper``, ``JitFunction``, ``InnerJit`` wired to this module's
    objects (a test hands a counting ``inner_call``, or no C legs), or None (no build, ``JAXPLACE_CAPTURE=python``)."""
    from jaxplace_cli.capture import native
    if (mod := native.wrap_module()) is None:
        return None
    mod.configure(active=active, tls=tls, trace_now=_trace_now, eval_trace=_EvalTrace,
                  inner_call=inner_call, drop_own=frames.drop_own, unwrapped=_unwrapped,
                  array_type=ArrayImpl, host_types=(np.ndarray, np.generic), record_inner=legs.record_inner,
                  inner_legs=getattr(native.module(), "inner_legs", None) if c_legs else None)  # record_inner's
    return mod.Wrapper, mod.PlainWrapper, mod.JitFunction, mod.InnerJit


_c_wrapper, _c_plain_wrapper, c_jit_function, c_inner_jit = configure_wrap() or (None, None, None, None)
