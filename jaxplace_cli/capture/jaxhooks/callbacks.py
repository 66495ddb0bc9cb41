"""Host callbacks inside device code: ``jax.pure_callback``, ``io_callback``, ``jax.debug.callback``.

A callback is two transfers per call: its operands leave the device for the host (d2h) and,
except for ``jax.debug.callback``, its results come back (h2d). XLA calls JAX's
``*_callback_impl`` (``debug_callback_p.impl``) with the operands at every execution, looked up
by name at that moment, so a patched attribute sees every call, compiled or not, eager or
inside ``jit`` (``jax.debug.print`` included); the hook records both legs
with the bytes at the device dtype, attributed to the user's line that called the jitted
function: the call in flight on this thread, or, when XLA runs the callback on its own thread,
the recorded call that traced it (noted by the primitive's ``bind``), so the line is the same on
every run (device: the call's first array argument's, else JAX's default device).

JAX stages the operands onto its CPU device and converts the results with NumPy; those are
the callback's own legs, so they are not counted again: the nesting depth hides the staging
``device_put``, and reads inside the callback's body (arrays on JAX's CPU device, in host
memory) are not transfers (``tls.host_side``).
"""
from __future__ import annotations

import sys
from threading import get_ident as _thread_ident
from time import perf_counter_ns

import jax
from jax.tree_util import tree_leaves

from jaxplace_cli.capture.frames import drop_own
from jaxplace_cli.capture.jaxhooks.common import _EvalTrace, _trace_now, array_nbytes, upload_nbytes
from jaxplace_cli.capture.jaxhooks.state import active, endpoint_label, label, tls, wraps
from jaxplace_cli.model.events import D2H, H2D, HOST, TransferEvent

# (module, object in it or "" for the module itself, attribute, API name, returns results).
# jax.debug.callback's lowering calls ``debug_callback_p.impl``, not the module function.
CALLBACK_IMPLS = (
    ("jax._src.callback", "", "pure_callback_impl", "jax.pure_callback", True),
    ("jax._src.callback", "", "io_callback_impl", "jax.experimental.io_callback", True),
    ("jax._src.debugging", "debug_callback_p", "impl", "jax.debug.callback", False),
)


def _nbytes(leaves) -> int:
    """Bytes at the device dtype (results are canonicalised by JAX before they are sent)."""
    n = 0
    for a in leaves:
        if isinstance(a, jax.Array):
            n += array_nbytes(a)
        elif hasattr(a, "size") and hasattr(a, "dtype"):
            n += upload_nbytes(a)
    return n


# id(callback param) -> (the param, site, jit name, device) of the recorded call that traced it;
# bounded (each entry keeps its callback alive): past it, a callback falls back to this thread's call
_ORIGIN: dict = {}
_MAX_ORIGINS = 65536


def _device_of(op):
    if op is not None:
        for leaf in tree_leaves((op[3], op[4])):
            if isinstance(leaf, jax.Array):
                return endpoint_label(leaf.sharding)
    try:
        d = jax.config.jax_default_device
        return label(d) if isinstance(d, jax.Device) else label(jax.devices()[0])
    except Exception:
        return "?"


def _note(cb, caller) -> None:
    """Note where callback ``cb`` was traced (``_ORIGIN``): the recorded call in flight on this
    thread, or, traced outside one (a vmap of a callback, batched as a scan), the user's line
    that traced it — on a TPU XLA runs callbacks on its own thread, where both were lost (seen
    at "?", docs/fidelity.md)."""
    op = tls.op
    rec = active.rec
    if cb is None or rec is None or id(cb) in _ORIGIN or len(_ORIGIN) >= _MAX_ORIGINS:
        return
    try:
        if op is not None:
            _ORIGIN[id(cb)] = (cb, op[2], op[0], _device_of(op))
        elif type(_trace_now.value) is not _EvalTrace:
            user, _ = rec.user_frame_and_caller(caller)
            if user is not None:
                _ORIGIN[id(cb)] = (cb, rec.site_of(user), None, _device_of(None))
    except Exception:
        pass


def make_noting(original):
    """``bind`` of a callback primitive, or ``debugging.debug_callback_lowering``
    (``jax.debug.print`` is a primitive of its own that makes its callback only when the call
    is lowered): note where the ``callback`` it is given was traced (``_note``), since XLA
    hands that object back to ``*_callback_impl`` at every execution, on whatever thread runs
    it."""

    def noting(*args, **params):
        _note(params.get("callback"), sys._getframe(1))
        return original(*args, **params)

    noting.__jaxplace_original__ = original
    return noting


def _where(callback):
    """(device label, site, op seq) of the call the callback runs inside: the call in flight on
    this thread, whatever its name (its line and seq: a jitted function called from three lines
    has its callbacks at each, and one called inside another jit at the outer call's line, where
    all were at the first call that traced it): XLA runs a program's callbacks inside its
    dispatch on the dispatching thread, or on a thread of its own (a TPU's; a loop's on the CPU:
    tests/test_callback_sites.py). There (no call in flight), a callback traced by a recorded call
    is at that call's line with no op seq: it may run after the dispatching call returned, where
    the thread's state would put it at ``?:0``, differently on every run, and which of the
    function's calls it belongs to is not known there."""
    op = tls.op
    origin = _ORIGIN.get(id(callback))
    if origin is not None and origin[0] is not callback:
        origin = None
    if op is not None:
        return (origin[3] if origin is not None else _device_of(op)), op[2], op[1]
    if origin is not None:
        return origin[3], origin[1], 0
    return _device_of(None), 0, 0


def _mark_on_host(leaves) -> None:
    for a in leaves:
        try:
            a._jaxplace_on_host = True  # transfers.py's host flag: read from host memory
        except (AttributeError, TypeError):
            pass


def make_callback_impl(original, api: str, returns: bool):
    @wraps(original)
    def impl(*args, callback, **params):
        rec = active.rec
        if rec is None:
            return original(*args, callback=callback, **params)
        dev, site, op_seq = _where(callback)
        thread = _thread_ident()
        rec.add_transfer(TransferEvent(rec.next_seq(), perf_counter_ns() - rec.t0, thread, D2H,
                                       dev, HOST, _nbytes(args), False, False,
                                       f"{api} (operands to host)", site, 0, op_seq))

        def user_callback(*staged):
            _mark_on_host(tree_leaves(staged))
            host_side, tls.host_side = tls.host_side, True
            try:
                return callback(*staged)
            except BaseException as exc:  # JAX logs it, XLA formats it: without this frame
                drop_own(exc)
                raise
            finally:
                tls.host_side = host_side

        depth = tls.depth
        tls.depth = 1
        try:
            out = original(*args, callback=user_callback, **params)
        except BaseException as exc:
            drop_own(exc)
            raise
        finally:
            tls.depth = depth
        if returns:
            rec.add_transfer(TransferEvent(rec.next_seq(), perf_counter_ns() - rec.t0, thread, H2D,
                                           HOST, dev, _nbytes(tree_leaves(out)), False, False,
                                           f"{api} (results to device)", site, 0, op_seq))
        return out

    impl.__jaxplace_original__ = original
    return impl


def make_token_input(original):
    """The runtime token of an ordered effect (``jax.debug.print(..., ordered=True)``, an
    ordered ``io_callback``): at every call JAX puts it on the call's devices, the first time
    an empty bool array, later the token itself, and the guard logs each as a host-to-device
    leg of 0 B (on CPU and on a TPU: docs/fidelity.md). Recorded as implicit uploads of the
    call; the ``device_put`` inside is hidden (depth), so a leg is never counted twice."""
    @wraps(original)
    def get_token_input(self, eff, devices):
        rec = active.rec
        if rec is None:
            return original(self, eff, devices)
        depth, tls.depth = tls.depth, 1
        try:
            tok = original(self, eff, devices)
        finally:
            tls.depth = depth
        try:
            op = tls.op
            name, site, op_seq = (op[5], op[2], op[1]) if op is not None else ("ordered effect", 0, 0)
            t, thread = perf_counter_ns() - rec.t0, _thread_ident()
            for d in devices:
                rec.add_transfer(TransferEvent(rec.next_seq(), t, thread, H2D, HOST, label(d), 0, True, False,
                                               f"{name} (ordered-effects token)", site, 0, op_seq))
        except Exception as exc:  # recording must never break the user's call
            rec.recording_failed(exc)
        return tok

    get_token_input.__jaxplace_original__ = original
    return get_token_input


def install(patch, report) -> None:
    import importlib

    from jax._src import dispatch as jax_dispatch

    tokens = getattr(jax_dispatch, "RuntimeTokenSet", None)
    if tokens is not None and "get_token_input" in tokens.__dict__:
        patch(tokens, "get_token_input", make_token_input(tokens.__dict__["get_token_input"]))

    names = []
    for modname, owner, attr, api, returns in CALLBACK_IMPLS:
        mod = importlib.import_module(modname)
        obj = getattr(mod, owner) if owner else mod
        patch(obj, attr, make_callback_impl(getattr(obj, attr), api, returns))
        names.append(api)
    for modname, prim in _PRIMITIVES:
        p = getattr(importlib.import_module(modname), prim, None)
        if p is not None:
            patch(p, "bind", make_noting(p.bind))
    debugging = importlib.import_module("jax._src.debugging")
    if callable(getattr(debugging, "debug_callback_lowering", None)):
        patch(debugging, "debug_callback_lowering", make_noting(debugging.debug_callback_lowering))
    report.installed.append(", ".join(names) + " (operands and results)")


# The primitives whose ``bind`` notes where a callback was traced.
_PRIMITIVES = (("jax._src.callback", "pure_callback_p"), ("jax._src.callback", "io_callback_p"),
               ("jax._src.debugging", "debug_callback_p"))
