"""The legs of a dispatch's inputs that need more than its result to be told (``host_leg``: host
data, one operand at a time), and where a jit call's compiled program put its inputs: its input
shardings, read from the executable after the call. They say how host data was split over the
devices of a sharded call (``sharded_upload``), and where a call that returned no array ran at
all (``resultless``).
"""
from __future__ import annotations

import sys
from threading import get_ident as _thread_ident

import jax

from jaxplace_cli.capture.jaxhooks.common import array_nbytes, input_shardings, upload_nbytes
from jaxplace_cli.capture.jaxhooks.host_data import data_id
from jaxplace_cli.capture.jaxhooks.legs import destinations, is_host, scalar_bytes, sharding_legs, suffix
from jaxplace_cli.capture.jaxhooks.state import HOST_DATA_TYPES, PY_SCALARS, sharding_label
from jaxplace_cli.model.events import D2D, H2D, HOST

# (seq, id of its leaves, input shardings) of the last sharded call: shared by its NumPy arguments
# (the leaves' id too: another recorder's seqs start again at 1)
_last_call = (0, 0, None)


def sharded_upload(fn, spec, args, kwargs, leaves, a, seq: int = 0) -> list:
    """[(device, bytes)] legs of host data ``a`` passed to a jit call over several devices: the
    devices received it as the compiled program's input sharding says — a numpy weight of
    32,768 B next to a batch sharded over 8 devices is replicated, 8 legs of 32,768 B. A placed
    or partitioned call, another JAX: [] (then one leg per device of the result). The call's
    shardings are looked up once for all its NumPy arguments (a cache key per argument was
    ~280 us a call of 100 parameters)."""
    global _last_call
    try:
        k = next(i for i, x in enumerate(leaves) if x is a)
        last = _last_call
        if seq and last[0] == seq and last[1] == id(leaves):
            shardings = last[2]
        else:
            shardings = input_shardings(fn, spec, args, kwargs, leaves)
            _last_call = (seq, id(leaves), shardings)
        return sharding_legs(shardings[k], a, upload_nbytes(a))
    except Exception:
        return []


def resultless(rec, spec, fn, args, kwargs, leaves, site: int, seq: int, t0: int, t1: int,
               backward: bool, placed: str) -> None:
    """A jit call that returned no array (it updates a ``jax.new_ref``, or returns Python values
    only): no result says where it ran, so its program's input shardings do. Each kept host
    argument is a leg there and an array elsewhere a move (the guard logs both: a
    ref-update loop's NumPy operand, 3 legs in 3 calls, was 0 before), and the call is an op on
    its first kept input's devices (it was none). Not a hot path: such calls are rare."""
    if getattr(fn, "moves_its_operands", False):  # a policy's per-op run: it records its own legs
        return
    try:
        shardings = input_shardings(fn, spec, args, kwargs, leaves)
    except Exception:  # a placed or partitioned call, another JAX: nothing can be told
        return
    kept = [(a, s) for a, s in zip(leaves, shardings, strict=True) if s is not None]
    if not kept:
        return
    tid, t0rel, stack, in_bufs = _thread_ident(), t0 - rec.t0, -1, []
    frame = sys._getframe(2)  # the hook's, as dispatch._after_call's sys._getframe(1)
    for a, sharding in kept:
        to = sharding_label(sharding)
        if isinstance(a, jax.Array):
            adev = sharding_label(a.sharding)
            committed = getattr(a, "_committed", True)
            b = rec.buffer_id(a, adev, committed, site, seq)
            in_bufs.append(b)
            if "," not in adev and to != adev:  # as dispatch._after_call's loop
                api = spec.api + (" (uncommitted input)" if not committed and "," not in to else "")
                stack = append_legs(rec, D2D, adev, sharding_legs(sharding, a, array_nbytes(a)), api, site, b, seq,
                                    t0rel, tid, stack, frame)
        elif is_host(a):
            scalar = type(a) in PY_SCALARS
            nbytes = scalar_bytes(a) if scalar else upload_nbytes(a)
            api, hid = (spec.scalar_api, 0) if scalar else (suffix(spec.api, a), data_id(rec, a, fn, args, kwargs))
            stack = append_legs(rec, H2D, HOST, sharding_legs(sharding, a, nbytes), api, site, hid, seq, t0rel, tid,
                                stack, frame)
    dev = sharding_label(kept[0][1])
    rec.ops.append((seq, t0rel, t1 - t0, tid, spec.kind, spec.name, dev, site,
                    in_bufs[0] if len(in_bufs) == 1 else tuple(in_bufs), (), "", backward, placed))


def host_leg(rec, spec, fn, args, kwargs, a, dev: str, out0, site: int, seq: int, t0rel: int, tid: int,
             stack: int, leaves=None, frame=None) -> int:
    """The host legs of one operand ``a`` of a dispatch (nothing if it is not host data), in
    operand order: dispatch._after_call's last branch, and the C hot path's (capture/_native.c
    ``record_fast``, which records arrays and scalars itself and hands each other operand of a
    one-device call here); an operand the compiled program drops is skipped before
    (``dropped_leaves``). Returns the call's stack node, made with its first transfer from
    ``frame`` (default: the caller's caller, the hook's frame when the C code calls)."""
    if not is_host(a):
        return stack
    scalar = type(a) in PY_SCALARS
    api = suffix(spec.api, a) if not scalar else spec.scalar_api
    if scalar or "," not in dev or not isinstance(a, HOST_DATA_TYPES):
        dests = destinations(out0, a)
    else:  # numpy data of a multi-device call: as the compiled program's sharding sent it
        dests = sharded_upload(fn, spec, args, kwargs, leaves, a, seq) or destinations(out0, a)
    hid = data_id(rec, a, fn, args, kwargs)  # which host array: a loader's or the same again
    return append_legs(rec, H2D, HOST, dests, api, site, hid, seq, t0rel, tid, stack,
                       frame if frame is not None else sys._getframe(1))


def append_legs(rec, kind, src, dests, api: str, site: int, buf: int, seq: int, t0rel: int, tid: int,
                stack: int, frame) -> int:
    """One transfer row per (device, bytes) of ``dests``, implicit, of the call ``seq``; the
    call's stack node made from ``frame`` with its first transfer (``stack`` < 0). Returns it."""
    on_transfer = rec.on_transfer
    for dst, nbytes in dests:
        if stack < 0:
            stack = rec.stack_of(frame)
        ev = (next(rec.seqs), t0rel, tid, kind, src, dst, nbytes, True, False, api, site, buf, seq, stack)
        rec.transfers.append(ev)
        if on_transfer is not None:
            on_transfer(ev)
    return stack
