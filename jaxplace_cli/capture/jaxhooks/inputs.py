"""The legs of a dispatch's inputs that need more than its result to be told (``host_leg``: host
data, one operand at a time), and where a jit call's compiled program put its inputs: its input
shardings, read from the executable after the call. They say how host data was split over the
devices of a sharded call (``sharded_upload``), and where a call that returned no array ran at
all (``resultless``).
"""
from __future__ import annotations

import contextlib
import sys
import weakref
from threading import get_ident as _thread_ident

import jax
import numpy as np
from jax.tree_util import tree_structure

from jaxplace_cli.capture.jaxhooks.common import array_nbytes, upload_nbytes
from jaxplace_cli.capture.jaxhooks.host_data import data_id
from jaxplace_cli.capture.jaxhooks.legs import destinations, is_host, scalar_bytes, suffix
from jaxplace_cli.capture.jaxhooks.state import HOST_DATA_TYPES, PY_SCALARS, label, sharding_label, static_positions
from jaxplace_cli.model.events import D2D, H2D, HOST

# jitted function -> {its call's signature: its input shardings}; weak: a function's entries go
# with it (an id reused by a new function would have handed it the old one's)
_IN_SHARDINGS = weakref.WeakKeyDictionary()


def sharded_upload(fn, spec, args, kwargs, leaves, a) -> list:
    """[(device, bytes)] legs of host data ``a`` passed to a jit call over several devices: the
    devices received it as the compiled program's input sharding says — a numpy weight of
    32,768 B next to a batch sharded over 8 devices is replicated, 8 legs of 32,768 B. A placed
    or partitioned call, another JAX: [] (then one leg per device of the result)."""
    try:
        k = next(i for i, x in enumerate(leaves) if x is a)
        return sharding_legs(input_shardings(fn, spec, args, kwargs, leaves)[k], a, upload_nbytes(a))
    except Exception:
        return []


def input_shardings(fn, spec, args, kwargs, leaves) -> list:
    """The compiled program's input sharding of each of the jit call's dynamic argument
    ``leaves`` (None: an argument it dropped), from ``fn.lower(...).compile()`` right after the
    call (the trace and the executable are cached: ~0.25 ms, no new trace, no compile event);
    a compiled function's own. Once per everything that decides them: the arguments' structure,
    each leaf's shape, dtype, sharding and commitment, the static values, the default device
    (the user's ``jax.default_device``, or the policy's that ran it). Flattened by the program's
    own argument tree: a ``None`` argument is no leaf of it. Raises where it cannot be told."""
    kwargs = kwargs or {}
    compiled = getattr(fn, "__self__", fn)  # a compiled function's call is its bound __call__
    if isinstance(compiled, jax.stages.Compiled):
        shardings = compiled.in_tree.flatten_up_to(compiled.input_shardings)
    else:
        device = getattr(fn, "default_device", None)  # a policy runs it there (engine._on_device)
        fn = getattr(fn, "__wrapped__", fn) if device is not None else fn
        static = static_positions(spec.static_argnums, len(args)) if spec.static_argnums else ()
        key = (device, jax.config.jax_default_device, tree_structure((args, kwargs)),
               tuple((getattr(x, "shape", None), str(getattr(x, "dtype", type(x).__name__)),
                      getattr(x, "sharding", None), getattr(x, "_committed", None)) for x in leaves),
               tuple(args[i] for i in sorted(static)),
               tuple(kwargs.get(k) for k in spec.static_argnames or ()))
        known = _IN_SHARDINGS.get(fn)
        if known is None:
            known = _IN_SHARDINGS[fn] = {}
        shardings = known.get(key)
        if shardings is None:
            with jax.default_device(device) if device is not None else contextlib.nullcontext():
                compiled = fn.lower(*args, **kwargs).compile()  # (the user's own default device stands)
            shardings = compiled.in_tree.flatten_up_to(compiled.input_shardings)
            if len(shardings) == len(leaves):
                if len(known) > 256:  # a function called with ever new shapes or static values
                    known.clear()
                known[key] = shardings
    if len(shardings) != len(leaves):
        raise ValueError("the input shardings do not match the arguments")
    return shardings


def sharding_legs(sharding, a, nbytes: int) -> list:
    """[(device label, bytes)]: ``a`` (``nbytes`` in all) as ``sharding`` puts it on each device."""
    shape = tuple(getattr(a, "shape", ()))
    itemsize = nbytes // max(int(np.prod(shape)), 1)
    legs = []
    for dev, index in sharding.addressable_devices_indices_map(shape).items():
        n = itemsize
        for dim, sl in zip(shape, index):
            n *= len(range(*sl.indices(dim))) if isinstance(sl, slice) else 1
        legs.append((label(dev), n))
    return legs


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
        moves = []
        if isinstance(a, jax.Array):
            adev = sharding_label(a.sharding)
            committed = getattr(a, "_committed", True)
            b = rec.buffer_id(a, adev, committed, site, seq)
            in_bufs.append(b)
            if "," not in adev and sharding_label(sharding) != adev:  # as dispatch._after_call's loop
                api = spec.api + (" (uncommitted input)" if not committed and "," not in sharding_label(sharding) else "")
                moves = [(D2D, adev, dst, n, api, b) for dst, n in sharding_legs(sharding, a, array_nbytes(a))]
        elif is_host(a):
            scalar = type(a) in PY_SCALARS
            nbytes = scalar_bytes(a) if scalar else upload_nbytes(a)
            api, hid = (spec.scalar_api, 0) if scalar else (suffix(spec.api, a), data_id(rec, a, fn, args, kwargs))
            moves = [(H2D, HOST, dst, n, api, hid) for dst, n in sharding_legs(sharding, a, nbytes)]
        for kind, src, dst, n, api, b in moves:
            if stack < 0:
                stack = rec.stack_of(frame)
            ev = (next(rec.seqs), t0rel, tid, kind, src, dst, n, True, False, api, site, b, seq, stack)
            rec.transfers.append(ev)
            if rec.on_transfer is not None:
                rec.on_transfer(ev)
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
        dests = sharded_upload(fn, spec, args, kwargs, leaves, a) or destinations(out0, a)
    hid = data_id(rec, a, fn, args, kwargs)  # which host array: a loader's or the same again
    on_transfer = rec.on_transfer
    for dst, nbytes in dests:
        if stack < 0:
            stack = rec.stack_of(frame if frame is not None else sys._getframe(1))
        ev = (next(rec.seqs), t0rel, tid, H2D, HOST, dst, nbytes, True, False, api, site, hid, seq, stack)
        rec.transfers.append(ev)
        if on_transfer is not None:
            on_transfer(ev)
    return stack
