"""Explicit transfer hooks: ``device_put``, ``device_get``, host reads of an Array.

Every device-to-host read funnels through ``ArrayImpl._value`` (``float()``, ``int()``,
``bool()``, ``.item()``, ``.tolist()``, ``np.asarray``, printing) — DESIGN.md fact 8 — so one
property hook sees them all; the API the user called is named from the frame just inside the
user's frame (``__float__`` -> ``float()``). Each Array is counted once: the first read
copies it to the host, later reads hit the host copy (as on GPU/TPU; the CPU backend may
alias memory instead, but jaxplace reports what a real accelerator would move).
"""
from __future__ import annotations

import functools
import sys
from threading import get_ident as _thread_ident
from time import perf_counter_ns

import jax
import numpy as np
from jax.tree_util import tree_leaves

from jaxplace_cli.capture.jaxhooks.dispatch import array_nbytes, is_recording
from jaxplace_cli.capture.jaxhooks.state import HOST_DATA_TYPES, active, sharding_label, tls
from jaxplace_cli.model.events import D2D, D2H, H2D, HOST, OP_DEVICE_GET, OP_DEVICE_PUT, OpEvent, TransferEvent

_Array = jax.Array
_PLAIN = (list, tuple, int, float, bool, complex, str, type(None))
_HOST_FLAG = "_jaxplace_on_host"

# Name of the JAX function the user called -> how a user would name the API.
READ_APIS = {
    "__float__": "float()",
    "__int__": "int()",
    "__bool__": "bool()",
    "__index__": "operator.index()",
    "__complex__": "complex()",
    "item": ".item()",
    "_item": ".item()",
    "tolist": ".tolist()",
    "tobytes": ".tobytes()",
    "__array__": "np.asarray()",
    "__repr__": "repr()/print",
    "__str__": "str()/print",
    "__format__": "format()/print",
    "__iter__": "iteration",
    "__hex__": "hex()",
    "__oct__": "oct()",
}


def _host_nbytes(leaf, out) -> int:
    if isinstance(leaf, HOST_DATA_TYPES):
        return int(leaf.nbytes)
    return array_nbytes(out)  # Python scalars/lists: the device copy's size is what moved


def make_device_put(original):
    """Replacement for ``jax.device_put``: explicit h2d for host data, d2d across devices."""

    @functools.wraps(original)
    def device_put(x, *args, **kwargs):
        if not is_recording():
            return original(x, *args, **kwargs)
        rec = active.rec
        site = rec.site_of(sys._getframe(1))
        seq = rec.next_seq()
        tls.depth = 1
        t0 = perf_counter_ns()
        try:
            out = original(x, *args, **kwargs)
        finally:
            tls.depth = 0
        t1 = perf_counter_ns()
        thread = _thread_ident()
        ins = tree_leaves(x)
        outs = tree_leaves(out)
        devs, in_bufs, out_bufs = [], [], []
        for i, o in zip(ins, outs):
            if not isinstance(o, _Array):
                continue
            dst = sharding_label(o.sharding)
            devs.append(dst)
            ob = rec.buffer_id(o, dst, getattr(o, "_committed", True), site, seq)
            out_bufs.append(ob)
            if isinstance(i, _Array):
                src = sharding_label(i.sharding)
                ib = rec.buffer_id(i, src, getattr(i, "_committed", True), site, seq)
                in_bufs.append(ib)  # aligned with out_bufs: analyses pair input i with output i
                if src != dst:
                    rec.add_transfer(TransferEvent(rec.next_seq(), t0 - rec.t0, thread, D2D,
                                                       src, dst, array_nbytes(o), False, False,
                                                       "jax.device_put", site, ob, seq))
            else:  # numpy data, Python scalars and lists all come from host memory
                in_bufs.append(0)
                rec.add_transfer(TransferEvent(rec.next_seq(), t0 - rec.t0, thread, H2D,
                                                   HOST, dst, _host_nbytes(i, o), False, False,
                                                   "jax.device_put", site, ob, seq))
        rec.ops.append(OpEvent(seq, t0 - rec.t0, t1 - t0, thread, OP_DEVICE_PUT, "device_put",
                               ",".join(dict.fromkeys(devs)), site, ",".join(map(str, in_bufs)),
                               ",".join(map(str, out_bufs)), "", False, ""))
        if active.on_dispatch is not None:
            active.on_dispatch()
        return out

    device_put.__jaxplace_original__ = original
    return device_put


def make_device_get(original):
    """Replacement for ``jax.device_get``: one blocking d2h per Array not yet on the host."""

    @functools.wraps(original)
    def device_get(x):
        if not is_recording():
            return original(x)
        rec = active.rec
        site = rec.site_of(sys._getframe(1))
        seq = rec.next_seq()
        thread = _thread_ident()
        t0 = perf_counter_ns()
        devs, bufs = [], []
        for leaf in tree_leaves(x):
            if not isinstance(leaf, _Array) or getattr(leaf, _HOST_FLAG, False):
                continue
            src = sharding_label(leaf.sharding)
            b = rec.buffer_id(leaf, src, getattr(leaf, "_committed", True), site, seq)
            devs.append(src)
            bufs.append(b)
            rec.add_transfer(TransferEvent(rec.next_seq(), t0 - rec.t0, thread, D2H, src, HOST,
                                               array_nbytes(leaf), False, True, "jax.device_get",
                                               site, b, seq))
            _mark_on_host(leaf)
        tls.depth = 1
        try:
            out = original(x)
        finally:
            tls.depth = 0
        t1 = perf_counter_ns()
        if bufs:
            rec.ops.append(OpEvent(seq, t0 - rec.t0, t1 - t0, thread, OP_DEVICE_GET, "device_get",
                                   ",".join(dict.fromkeys(devs)), site, ",".join(map(str, bufs)),
                                   "", "", False, ""))
        if active.on_dispatch is not None:
            active.on_dispatch()
        return out

    device_get.__jaxplace_original__ = original
    return device_get


def _mark_on_host(arr) -> None:
    try:
        setattr(arr, _HOST_FLAG, True)
    except (AttributeError, TypeError):
        pass


def make_value_property(original: property) -> property:
    """Replacement for ``ArrayImpl._value``: records the first host read of each Array."""
    fget = original.fget

    def _value(self):
        rec = active.rec
        if rec is None or getattr(self, _HOST_FLAG, False):
            return fget(self)
        t0 = perf_counter_ns()
        result = fget(self)  # may raise (deleted array): then nothing moved
        _record_read(rec, self, t0, blocking=True, api=None)
        return result

    return property(_value, original.fset, original.fdel, original.__doc__)


def make_copy_to_host_async(original):
    """Replacement for ``Array.copy_to_host_async``: a non-blocking d2h."""

    @functools.wraps(original)
    def copy_to_host_async(self):
        rec = active.rec
        if rec is not None and not getattr(self, _HOST_FLAG, False):
            _record_read(rec, self, perf_counter_ns(), blocking=False, api=".copy_to_host_async()")
        return original(self)

    copy_to_host_async.__jaxplace_original__ = original
    return copy_to_host_async


def make_numpy_reader(original, api: str):
    """Replacement for ``np.asarray``-like functions.

    On the CPU backend NumPy reads a jax.Array through the buffer protocol, which never
    enters Python (no ``__array__``, no ``_value``), so the read is caught where the user
    asked for it. On GPU/TPU the ``_value`` hook sees it too; the host flag keeps it single.
    """

    @functools.wraps(original)
    def reader(a, *args, **kwargs):
        t = type(a)  # numpy data is by far the most common argument: skip the ABC check
        if t is not np.ndarray and t not in _PLAIN and isinstance(a, _Array):
            rec = active.rec
            if rec is not None and not getattr(a, _HOST_FLAG, False):
                _record_read(rec, a, perf_counter_ns(), blocking=True, api=api)
        return original(a, *args, **kwargs)

    reader.__jaxplace_original__ = original
    return reader


def _record_read(rec, arr, t0, blocking: bool, api) -> None:
    try:
        op = tls.op
        if op is not None:  # JAX read a concrete value while running an op: implicit
            name, op_seq, site = op[0], op[1], op[2]
            api, implicit = f"{name} (reads value)", True
        else:
            frame = sys._getframe(2)
            user, below = rec.user_frame_and_caller(frame)
            site = rec.site_of(user) if user is not None else 0
            if below is not None:
                api = READ_APIS.get(below.f_code.co_name, api or below.f_code.co_name)
            api = api or "read"
            op_seq, implicit = 0, False
        src = sharding_label(arr.sharding)
        b = rec.buffer_id(arr, src, getattr(arr, "_committed", True), site, op_seq)
        rec.add_transfer(TransferEvent(rec.next_seq(), t0 - rec.t0, _thread_ident(), D2H, src,
                                           HOST, array_nbytes(arr), implicit, blocking, api, site,
                                           b, op_seq))
        _mark_on_host(arr)
    except Exception:
        pass  # a recording failure must never break a host read

