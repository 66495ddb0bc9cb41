"""Device-to-host hooks: ``device_get`` and every host read of an Array (``device_put`` and
the other placement APIs are uploads.py's).

Every device-to-host read funnels through ``ArrayImpl._value`` (``float()``, ``int()``,
``bool()``, ``.item()``, ``.tolist()``, ``np.asarray``, printing), so one
property hook sees them all; the API the user called is named from the frame just inside the
user's frame (``__float__`` -> ``float()``). Each Array is counted once: the first read
copies it to the host, later reads hit the host copy (as on GPU/TPU; the CPU backend may
alias memory instead, but jaxplace reports what a real accelerator would move).
"""
from __future__ import annotations

import sys
from threading import get_ident as _thread_ident
from time import perf_counter_ns

import jax
import numpy as np
from jax.tree_util import tree_leaves

from jaxplace_cli.capture.jaxhooks import syncs
from jaxplace_cli.capture.jaxhooks.common import array_nbytes, called_api, is_recording
from jaxplace_cli.capture.jaxhooks.state import active, endpoint_label, sharding_label, tls, wraps
from jaxplace_cli.capture.recorder import BUF_ATTR
from jaxplace_cli.model.events import D2H, HOST, OP_DEVICE_GET, OpEvent, TransferEvent

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


def make_device_get(original):
    """Replacement for ``jax.device_get``: one d2h per Array not yet on the host; the call
    waits once (syncs.py decides whether that wait stalled the device)."""

    @wraps(original)
    def device_get(x):
        if not is_recording():
            return original(x)
        rec = active.rec
        try:
            site = rec.site_of(sys._getframe(1))
            seq = rec.next_seq()
            thread = _thread_ident()
            t0 = perf_counter_ns()
            devs, bufs, pending = [], [], []
            for leaf in tree_leaves(x):
                if not isinstance(leaf, _Array) or getattr(leaf, _HOST_FLAG, False):
                    continue
                src = sharding_label(leaf.sharding)
                b = rec.buffer_id(leaf, src, getattr(leaf, "_committed", True), site, seq)
                devs.append(src)
                bufs.append(b)
                pending.append((leaf, src, b, syncs.measure_ready(leaf, src)))
        except Exception as exc:  # the recording failed, not the call: run it unrecorded
            rec.recording_failed(exc)
            return original(x)
        tls.depth, tls.in_device_get = 1, True
        try:
            out = original(x)
        finally:
            tls.depth, tls.in_device_get = 0, False
        t1 = perf_counter_ns()
        try:
            _record_get(rec, pending, devs, bufs, site, seq, thread, t0, t1)
        except Exception as exc:  # the user keeps the values: counted, said at the end
            rec.recording_failed(exc)
        return out

    device_get.__jaxplace_original__ = original
    return device_get


def _record_get(rec, pending, devs, bufs, site, seq, thread, t0, t1) -> None:
    for leaf, src, b, ready in pending:
        blocking = syncs.read_blocks(rec, leaf, src, b, ready)
        rec.add_transfer(TransferEvent(rec.next_seq(), t0 - rec.t0, thread, D2H,
                                       endpoint_label(leaf.sharding), HOST, array_nbytes(leaf),
                                       False, blocking, "jax.device_get", site, b, seq))
        _mark_on_host(leaf)
    if bufs:
        rec.ops.append(OpEvent(seq, t0 - rec.t0, t1 - t0, thread, OP_DEVICE_GET, "device_get",
                               ",".join(dict.fromkeys(devs)), site, ",".join(map(str, bufs)),
                               "", "", False, ""))
    if active.on_dispatch is not None:
        active.on_dispatch()


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
        if rec is None or tls.in_device_get or getattr(self, _HOST_FLAG, False):
            return fget(self)  # (inside jax.device_get: it records each array's read itself)
        t0 = perf_counter_ns()
        ready = syncs.measure_ready(self, sharding_label(self.sharding))
        result = fget(self)  # may raise (deleted array): then nothing moved
        _record_read(rec, self, t0, blocking=True, api=None, ready=ready)
        return result

    return property(_value, original.fset, original.fdel, original.__doc__)


def make_copy_to_host_async(original):
    """Replacement for ``Array.copy_to_host_async``: a non-blocking d2h."""

    @wraps(original)
    def copy_to_host_async(self):
        rec = active.rec
        # inside jax.device_get (tls.depth), which records its own read of each array: JAX's
        # device_get calls copy_to_host_async first, and one array crosses once
        if rec is not None and not tls.in_device_get and not getattr(self, _HOST_FLAG, False):
            _record_read(rec, self, perf_counter_ns(), blocking=False, api=".copy_to_host_async()")
        return original(self)

    copy_to_host_async.__jaxplace_original__ = original
    return copy_to_host_async


def make_block_until_ready(original):
    """``Array.block_until_ready``: not a transfer, but a wait — after it the host knows the
    device finished this value (syncs.py), so a read that follows does not block."""

    @wraps(original)
    def block_until_ready(self):
        out = original(self)
        rec = active.rec
        if rec is not None:
            try:
                d = getattr(self, "__dict__", None)
                b = d.get(BUF_ATTR, 0) if d is not None else 0
                syncs.waited(rec, sharding_label(self.sharding), b)
            except Exception:
                pass
        return out

    block_until_ready.__jaxplace_original__ = original
    return block_until_ready


def make_numpy_reader(original, api: str):
    """Replacement for ``np.asarray``-like functions.

    On the CPU backend NumPy reads a jax.Array through the buffer protocol, which never
    enters Python (no ``__array__``, no ``_value``), so the read is caught where the user
    asked for it. On GPU/TPU the ``_value`` hook sees it too; the host flag keeps it single.
    """

    @wraps(original)
    def reader(a, *args, **kwargs):
        t = type(a)  # numpy data is by far the most common argument: skip the ABC check
        if t is not np.ndarray and t not in _PLAIN and isinstance(a, _Array):
            rec = active.rec
            if rec is not None and not getattr(a, _HOST_FLAG, False):
                _record_read(rec, a, perf_counter_ns(), blocking=True, api=api)
        return original(a, *args, **kwargs)

    reader.__jaxplace_original__ = original
    return reader


def _record_read(rec, arr, t0, blocking: bool, api, ready=None) -> None:
    """One d2h of ``arr``. ``blocking``: the API waits for the value (False for
    ``copy_to_host_async``); whether that wait stalled the device is syncs.py's model.
    Inside an explicit placement API (a reshard through the host) the read is a leg of it."""
    try:
        if tls.host_side:
            _mark_on_host(arr)
            return
        src = sharding_label(arr.sharding)
        legs = tls.collect
        if legs is not None:
            legs.append((D2H, endpoint_label(arr.sharding), HOST, array_nbytes(arr), arr))
            _mark_on_host(arr)
            return
        op = tls.op
        if op is not None:  # JAX read a concrete value while running an op: implicit
            name, op_seq, site = op[5], op[1], op[2]  # its label: x[i] for getitem
            api, implicit = f"{name} (reads value)", True
        else:
            frame = sys._getframe(2)
            user, below = rec.user_frame_and_caller(frame)
            site = rec.site_of(user) if user is not None else 0
            if below is not None:
                # a reader's own name (np.asarray()) stands unless a read API is below it
                api = called_api(frame, user, READ_APIS, api, outer_jax=False) if api else \
                    called_api(frame, user, READ_APIS, "read")
            api = api or "read"
            op_seq, implicit = 0, False
        b = rec.buffer_id(arr, src, getattr(arr, "_committed", True), site, op_seq)
        if blocking:
            blocking = syncs.read_blocks(rec, arr, src, b, ready)
        rec.add_transfer(TransferEvent(rec.next_seq(), t0 - rec.t0, _thread_ident(), D2H,
                                       endpoint_label(arr.sharding), HOST, array_nbytes(arr),
                                       implicit, blocking, api, site, b, op_seq))
        _mark_on_host(arr)
    except Exception as exc:  # a recording failure must never break a host read
        rec.recording_failed(exc)
