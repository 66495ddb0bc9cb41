"""Explicit placement APIs, counted per device: the bytes each device received.

``jax.device_put``, ``jax.make_array_from_callback``, ``jax.make_array_from_process_local_data``
and ``jax.make_array_from_single_device_arrays`` all end (jax 0.10.2) in two entry points of
``jaxlib.xla_client``:

* ``batched_device_put(aval, sharding, xs, devices)`` — one value per destination device: host
  data (an h2d of its size at the device dtype) or a one-device Array (a d2d when it sits on
  another device, nothing when it is already there);
* ``batched_copy_array_to_devices_with_sharding(xs, device_lists, ...)`` — an Array's shards
  copied to other devices, same layout (a d2d per shard that changes device).

A reshard JAX cannot do between devices goes through the host: ``Array._value`` reads the array
(a d2h of the whole array, transfers.py), then ``batched_device_put`` uploads numpy slices (the
h2d legs). The public APIs are wrapped (one op, named as the user called it); while one runs,
``tls.collect`` holds the list the low-level hooks append their legs to, and the wrapper writes
one transfer per array and direction with the exact sum and the devices involved as endpoints
(model.events.device_group_label): a (16, 1024) float32 batch sharded over 8 devices is one
h2d ``host>cpu:0-7`` of 65,536 B; replicated over 8 devices, one h2d of 524,288 B (each device
received a copy). A low-level call outside every wrapper and every recorded op (a library
calling JAX's internals) is recorded on its own, at the user's line.
"""
from __future__ import annotations

import json
import sys
from threading import get_ident as _thread_ident
from time import perf_counter_ns

import jax
import numpy as np
from jax.tree_util import tree_leaves

from jaxplace_cli.capture.jaxhooks import syncs
from jaxplace_cli.capture.jaxhooks.common import (
    _EvalTrace,
    _trace_now,
    array_nbytes,
    called_api,
    is_recording,
    recording_failed,
)
from jaxplace_cli.capture.jaxhooks.host_data import data_id
from jaxplace_cli.capture.jaxhooks.state import active, endpoint_label, label, sharding_label, tls, wraps
from jaxplace_cli.model.events import (
    D2D,
    D2H,
    H2D,
    HOST,
    MARKER_HOST_PUT,
    OP_DEVICE_PUT,
    OpEvent,
    TransferEvent,
    device_group_label,
)

_Array = jax.Array

# public API -> (name of the op, which argument holds the input data)
PUT_APIS = {
    "device_put": 0,
    "make_array_from_callback": None,
    "make_array_from_process_local_data": 1,
    "make_array_from_single_device_arrays": 2,
}


def _itemsize(dtype) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # an extended dtype (PRNG keys): its own itemsize, if it says one
        return int(getattr(dtype, "itemsize", 0) or 0)


def _host_bytes(x, itemsize: int) -> int:
    return int(np.size(x)) * itemsize


def _put_legs(aval, xs, devices, out, legs) -> None:
    itemsize = _itemsize(aval.dtype)
    for x, d in zip(xs, devices):
        dst = label(d)
        if isinstance(x, _Array):  # JAX logs (and counts) this leg even onto x's own device
            legs.append((D2D, endpoint_label(x.sharding), dst, array_nbytes(x), out))
        else:  # host data: numpy (already at the device dtype here), a Python scalar
            legs.append((H2D, HOST, dst, _host_bytes(x, itemsize), out))


def _copy_legs(xs, device_lists, outs, legs) -> None:
    for x, dl, out in zip(xs, device_lists, outs):
        src_devs = list(x.sharding._addressable_device_assignment)
        dst_devs = list(dl.addressable_device_list)
        shard = x.sharding.shard_shape(x.shape)
        nbytes = int(np.prod(shard, dtype=np.int64)) * _itemsize(x.dtype)
        for s, t in zip(src_devs, dst_devs):
            if s != t:
                legs.append((D2D, label(s), label(t), nbytes, out))


def make_batched_device_put(original):
    """``xla_client.batched_device_put``: the per-device values of one new array."""

    @wraps(original)
    def batched_device_put(aval, sharding, xs, devices, *args, **kwargs):
        out = original(aval, sharding, xs, devices, *args, **kwargs)
        legs = tls.collect
        if legs is None and not is_recording():
            if tls.depth == 1 and tls.op is not None and active.rec is not None:  # inside an eager op
                _inner_put(aval, xs, devices, out)
            return out
        try:
            if legs is not None:
                _put_legs(aval, xs, devices, out, legs)
            else:
                own: list = []
                _put_legs(aval, xs, devices, out, own)
                _standalone(own, sys._getframe(1))
        except Exception as exc:  # recording must never break an upload
            recording_failed(exc)
        return out

    batched_device_put.__jaxplace_original__ = original
    return batched_device_put


def _inner_put(aval, xs, devices, out) -> None:
    """Host data put on devices by JAX's own ``device_put`` inside an eager op (only the host
    legs: an array moved inside an op is the op's d2d, counted from its operands). Only a
    ``device_put``'s (``dispatch._batched_device_put_impl`` below): the same entry point also
    uploads a jit call's arguments on JAX's Python dispatch path (a first call), arguments the
    C++ path uploads unseen on every later call, so counting them here would count them once."""
    try:  # the checks too: recording must never break an upload
        if type(_trace_now.value) is not _EvalTrace or not xs or not _from_device_put(sys._getframe(2)):
            return
        own: list = []
        _put_legs(aval, xs, devices, out, own)
        host = [(dst, n) for kind, _src, dst, n, _o in own if kind == H2D]
        if host:
            from jaxplace_cli.capture.jaxhooks.legs import record_inner_put

            record_inner_put(xs[0], host)
    except Exception as exc:  # recording must never break an upload
        recording_failed(exc)


def _from_device_put(frame, depth: int = 8) -> bool:
    while frame is not None and depth:
        if frame.f_code.co_name == "_batched_device_put_impl":
            return True
        frame = frame.f_back
        depth -= 1
    return False


def make_batched_copy(original):
    """``xla_client.batched_copy_array_to_devices_with_sharding``: shards copied to devices."""

    @wraps(original)
    def batched_copy(xs, device_lists, *args, **kwargs):
        outs = original(xs, device_lists, *args, **kwargs)
        legs = tls.collect
        if legs is None and not is_recording():
            return outs
        try:
            if legs is not None:
                _copy_legs(xs, device_lists, outs, legs)
            else:
                own: list = []
                _copy_legs(xs, device_lists, outs, own)
                _standalone(own, sys._getframe(1))
        except Exception as exc:
            recording_failed(exc)
        return outs

    batched_copy.__jaxplace_original__ = original
    return batched_copy


def _standalone(legs, frame) -> None:
    """Legs of a low-level call no wrapper saw: recorded at the user's line, named after the
    outermost JAX function the user called."""
    if not legs:
        return
    rec = active.rec
    user, below = rec.user_frame_and_caller(frame)
    site = rec.site_of(user) if user is not None else 0
    api = called_api(frame, user) if below is not None else "jax"
    _emit(rec, _groups(legs), {}, api, site, 0, perf_counter_ns())


def _slice_bytes(shape, index, itemsize: int) -> int:
    n = itemsize
    for dim, s in zip(shape, index):
        n *= len(range(*s.indices(dim))) if isinstance(s, slice) else 1
    return n


def _index_key(index) -> tuple:
    return tuple((s.start, s.stop, s.step) if isinstance(s, slice) else s for s in index)


def _fallback_legs(x, o) -> list:
    """What moved into ``o`` when no low-level hook saw it (JAX resharded with a compiled
    program, or this JAX has other entry points): each of ``o``'s shards that no device of
    ``x`` already held at the same index arrived from elsewhere."""
    legs: list = []
    itemsize = _itemsize(o.dtype)
    dst_map = o.sharding.addressable_devices_indices_map(o.shape)
    if not isinstance(x, _Array):
        for d, idx in dst_map.items():
            legs.append((H2D, HOST, label(d), _slice_bytes(o.shape, idx, itemsize), o))
        return legs
    holders: dict = {}
    for d, idx in x.sharding.addressable_devices_indices_map(x.shape).items():
        holders.setdefault(_index_key(idx), []).append(d)
    for d, idx in dst_map.items():
        have = holders.get(_index_key(idx), [])
        if d not in have:
            src = label(have[0]) if have else endpoint_label(x.sharding)
            legs.append((D2D, src, label(d), _slice_bytes(o.shape, idx, itemsize), o))
    return legs


def _groups(legs) -> list:
    """Legs -> ``[kind, key array, [source], [destination], bytes]``: one per leg (the unit
    JAX's transfer guard counts, docs/fidelity.md), so totals and per-device views agree."""
    return [[kind, key, [src], [dst], nbytes] for kind, src, dst, nbytes, key in legs]


def _match(groups, outs) -> dict:
    """id(group) -> the returned array it made. h2d/d2d legs name the array the low-level
    call made, which JAX may wrap in a new object before returning it: matched to the
    returned arrays by identity, else by shape and dtype, in order (all legs of one array
    to the same returned array)."""
    free = list(outs)
    by_key: dict = {}
    out = {}
    for g in groups:
        if g[0] == D2H:
            continue
        key = g[1]
        if id(key) not in by_key:
            for k, o in enumerate(free):
                if o is key or (o.shape == key.shape and o.dtype == key.dtype):
                    by_key[id(key)] = free.pop(k)
                    break
        if id(key) in by_key:
            out[id(g)] = by_key[id(key)]
    return out


def _emit(rec, groups, made, api, site, seq, t0, through_host=frozenset()) -> None:
    """One transfer per group; ``made``: id(group) -> returned array (its buffer id);
    ``through_host``: ids of returned arrays whose upload is the second leg of a reshard
    through the host (named so, implicit: the user asked for a device move)."""
    thread = _thread_ident()
    for g in groups:
        kind, key, srcs, dsts, nbytes = g
        arr = made.get(id(g), key)
        buf = rec.buffer_id(arr, sharding_label(arr.sharding), getattr(arr, "_committed", True),
                            site, seq) if isinstance(arr, _Array) else 0
        via_host = kind == D2H or id(arr) in through_host
        blocking = kind == D2H and syncs.read_blocks(rec, key, srcs[0], buf)
        rec.add_transfer(TransferEvent(rec.next_seq(), t0 - rec.t0, thread, kind,
                                       device_group_label(srcs), device_group_label(dsts), nbytes,
                                       via_host, blocking, api + (" (through host)" if via_host else ""),
                                       site, buf, seq))


def make_put_api(original, name: str, data_arg):
    """A recording wrapper for one explicit placement API (``PUT_APIS``)."""
    api = f"jax.{name}"

    @wraps(original)
    def put(*args, **kwargs):
        if not is_recording():
            return original(*args, **kwargs)
        rec = active.rec
        try:
            site = rec.site_of(sys._getframe(1))
            seq = rec.next_seq()
        except Exception as exc:  # the recording failed, not the call: run it unrecorded
            rec.recording_failed(exc)
            return original(*args, **kwargs)
        legs: list = []
        tls.depth = 1
        tls.collect = legs
        t0 = perf_counter_ns()
        try:
            out = original(*args, **kwargs)
        finally:
            tls.depth = 0
            tls.collect = None
        t1 = perf_counter_ns()
        try:
            _record_put(rec, name, api, args, data_arg, out, legs, site, seq, t0, t1)
        except Exception as exc:  # recording must never break a placement
            rec.recording_failed(exc)
        return out

    put.__jaxplace_original__ = original
    return put


def _record_put(rec, name, api, args, data_arg, out, legs, site, seq, t0, t1) -> None:
    data = args[data_arg] if data_arg is not None and len(args) > data_arg else None
    ins = tree_leaves(data) if data is not None else []
    outs = [o for o in tree_leaves(out) if isinstance(o, _Array)]
    groups = _groups(legs)
    made = _match(groups, outs)
    through_host = set()
    if name == "device_put" and len(ins) == len(outs):
        reached = {id(o) for o in made.values()}
        read = {id(g[1]) for g in groups if g[0] == D2H}
        for i, o in zip(ins, outs):
            if id(i) in read:
                through_host.add(id(o))
            if id(o) not in reached and (not isinstance(i, _Array) or i.sharding != o.sharding):
                extra = _groups(_fallback_legs(i, o))  # moved where no low-level hook looked
                groups += extra
                made.update({id(g): o for g in extra})
    _emit(rec, groups, made, api, site, seq, t0, through_host)
    if name == "device_put":
        _host_put(rec, seq, ins, args)
    in_bufs = [rec.buffer_id(i, sharding_label(i.sharding), getattr(i, "_committed", True), site, seq)
               if isinstance(i, _Array) else 0 for i in ins]
    out_bufs, devs = [], []
    for o in outs:
        dev = sharding_label(o.sharding)
        devs.append(dev)
        out_bufs.append(rec.buffer_id(o, dev, getattr(o, "_committed", True), site, seq))
    if out_bufs:
        syncs.dispatched(rec, devs[0], out_bufs[0])
    rec.ops.append(OpEvent(seq, t0 - rec.t0, t1 - t0, _thread_ident(), OP_DEVICE_PUT, name,
                           ",".join(dict.fromkeys(devs)), site, ",".join(map(str, in_bufs)),
                           ",".join(map(str, out_bufs)), "", False, ""))
    if active.on_dispatch is not None:
        active.on_dispatch()


def _host_put(rec, seq, ins, args) -> None:
    """The host arrays an explicit ``device_put`` uploaded, by identity (host_data.py): the same
    array put on the device again and again in a loop (the repeated-put rule; a review found
    ``step(x, jax.device_put(mask))`` with no finding). A marker per put of NumPy data."""
    ids = [data_id(rec, i, None, args, {}) for i in ins if isinstance(i, np.ndarray)]
    ids = [h for h in ids if h < 0]
    if ids:
        rec.marker(MARKER_HOST_PUT, json.dumps({"op": seq, "ids": ids}, separators=(",", ":")))


def install(patch, report) -> None:
    """Patch the low-level entry points and the public placement APIs (``patch`` records
    each original for ``uninstall``)."""
    from jax._src.lib import xla_client

    patch(xla_client, "batched_device_put", make_batched_device_put(xla_client.batched_device_put))
    from jaxplace_cli.capture.jaxhooks import dispatch, legs

    n = legs.install_inner(patch, dispatch.c_inner_jit)
    report.installed.append(f"jax._src jitted helpers ({n}, host legs)")
    patch(xla_client, "batched_copy_array_to_devices_with_sharding",
          make_batched_copy(xla_client.batched_copy_array_to_devices_with_sharding))
    names = []
    for name, data_arg in PUT_APIS.items():
        original = getattr(jax, name, None)
        if original is None:
            continue
        patch(jax, name, make_put_api(original, name, data_arg))
        names.append(f"jax.{name}")
    report.installed.append(", ".join(names) + " (per-device legs)")


__all__ = ["install"]
