"""Host->device legs counted where JAX makes them: one recorded transfer per leg JAX's transfer
guard logs (``JAX_TRANSFER_GUARD=log_explicit``), attributed to the user's op in flight.

Why here and not at the user's call: a host value is uploaded only when it becomes an
*argument of a dispatch* — an eagerly bound primitive (``EvalTrace.process_primitive`` runs it
as a one-primitive jit) or a call of a jitted function (``PjitFunction``), whose non-static
arguments JAX's C++ fast path puts on the devices of the compiled program's input sharding,
one leg per device. Which Python values reach that point is decided deep inside ``jax.numpy``:
``jnp.ones(3)`` binds ``convert_element_type`` on its fill value (1 leg), ``jnp.clip(x, 0.0,
1.0)`` passes both bounds to a jit (2), ``x ** 2`` becomes ``integer_pow`` with the 2 as a
*parameter* (0). So the outermost hook (the op the user called) counts only what it passes to a
dispatch itself (it wraps a ``PjitFunction``, a ufunc or a primitive), and every inner dispatch
point — the primitive hook, the ufunc hook, the jitted functions of ``jax._src``'s modules
(``inner_pjit``) — adds the legs of its own host arguments to the op in flight (``tls.op``).
Measured against the guard on single- and 8-device programs: tests/test_library_corpus.py,
tests/test_fidelity_legs.py; the paths that stay unseen are listed in docs/fidelity.md.
"""
from __future__ import annotations

import sys
import weakref
from threading import get_ident as _thread_ident
from time import perf_counter_ns

import numpy as np
from jax._src.array import ArrayImpl
from jax.tree_util import tree_leaves

from jaxplace_cli.capture.jaxhooks.common import (
    _SCALAR_BYTES,
    JitProxy,
    _EvalTrace,
    _trace_now,
    input_shardings,
    kept_leaves,
    recording_failed,
    upload_nbytes,
    x64_enabled,
)
from jaxplace_cli.capture.jaxhooks.host_data import data_id, jax_made
from jaxplace_cli.capture.jaxhooks.state import (
    HOST_DATA_APIS,
    active,
    label,
    static_positions,
    tls,
)
from jaxplace_cli.model.events import H2D, HOST

_SCALAR_TYPES = (bool, int, float, complex)
_SEQUENCES = (list, tuple)


def is_host(a) -> bool:
    """A value JAX uploads when it is a dispatch argument: NumPy data (``TypedNdArray``
    included) or a Python scalar (JAX's typed scalar literals included)."""
    t = type(a)
    if t is ArrayImpl:
        return False
    return isinstance(a, (np.ndarray, np.generic)) or isinstance(a, _SCALAR_TYPES)


def scalar_bytes(a) -> int:
    """Device bytes of a Python scalar: 4 (8 with x64), bool 1, complex 8 (16)."""
    table = _SCALAR_BYTES[x64_enabled()]
    for t in (bool, int, float, complex):
        if isinstance(a, t):
            return table[t]
    return table[float]


def host_bytes(a) -> int:
    if isinstance(a, (np.ndarray, np.generic)):
        return upload_nbytes(a)
    return scalar_bytes(a)


def host_args(args, kwargs, static_nums=(), static_names=()) -> list:
    """The host leaves among a dispatch's arguments (static ones excluded: they are compile-time
    constants, never uploaded)."""
    out = []
    if static_nums and min(static_nums) < 0:
        static_nums = static_positions(static_nums, len(args))
    for i, a in enumerate(args):  # no filtered copies: every x.sum() runs this (issue 29)
        t = type(a)
        if t is ArrayImpl or a is None or i in static_nums:
            continue
        if t in _SEQUENCES or t is dict:
            out.extend(x for x in tree_leaves(a) if is_host(x))
        elif is_host(a):
            out.append(a)
    for k in sorted(kwargs):  # tree_leaves(kwargs)'s order; None and arrays hold no host leaf
        v = kwargs[k]
        if v is not None and type(v) is not ArrayImpl and k not in static_names:
            out.extend(x for x in tree_leaves(v) if is_host(x))
    return out


def destinations(out, a, nbytes=None) -> list:
    """[(device label, bytes)] of value ``a`` (host data, or a one-device array of ``nbytes``)
    passed to a dispatch that returned ``out``:
    one leg per device the computation runs on; an operand shaped like the result arrives
    sharded as the result is (the input sharding JAX infers for it), any other replicated."""
    res = out if type(out) is ArrayImpl else next(
        (o for o in tree_leaves(out) if type(o) is ArrayImpl), None)
    if nbytes is None:
        nbytes = host_bytes(a)
    if res is None:
        return []
    sh = res.sharding
    d = getattr(sh, "_device", None)
    if d is not None:
        return [(label(d), nbytes)]
    shape = getattr(a, "shape", ())
    try:
        if shape and tuple(shape) == tuple(res.shape):
            return sharding_legs(sh, a, nbytes)
        return [(label(dev), nbytes) for dev in sh._addressable_device_assignment]
    except Exception:
        return [(label(dev), nbytes) for dev in getattr(sh, "device_set", ())]


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


def suffix(name: str, a) -> str:
    """A host leg's label: the op's public call (``name``: ``jnp.dot``, ``x + y``) and what
    was uploaded."""
    if name in HOST_DATA_APIS:
        return f"{name} (host data)"
    if isinstance(a, (np.ndarray, np.generic)) and not (getattr(a, "ndim", 1) == 0 and jax_made(a)):
        return f"{name} (numpy argument)"
    return f"{name} (Python scalar)"


def record_inner(hosts, out) -> None:
    """The legs of an inner dispatch's host arguments, as transfers of the op in flight."""
    try:
        uploads = [(a, destinations(out, a)) for a in hosts]
    except Exception as exc:  # recording must never break the user's op
        recording_failed(exc)
        return
    _op_legs(uploads, implicit=True)


def record_inner_put(data, host_legs) -> None:
    """The host->device legs ``[(device, bytes)]`` of a low-level upload of ``data`` inside an op
    in flight that leaves its legs to what it dispatches (a plain function: ``spec.scalars``
    false): ``jnp.asarray(x, jnp.float32)`` of a float32 ``x`` puts it with ``device_put``, not
    as a dispatch argument (the path every other leg here comes from), and flax's
    ``promote_dtype`` calls exactly that. Explicit, as JAX's transfer guard logs it. Under an op
    that counts its own host operands, or an inner dispatch that counted its arguments
    (``tls.inner``), such an upload is that argument's, on JAX's Python dispatch path."""
    op = tls.op
    if op is not None and tls.depth == 1 and not tls.inner and not op[6].scalars:
        _op_legs([(data, host_legs)], implicit=False)


def _op_legs(uploads, implicit: bool) -> None:
    """``[(host value, [(device, bytes)])]`` as h2d transfers of the op in flight (``tls.op``)."""
    rec = active.rec
    op = tls.op
    if rec is None or op is None:
        return
    try:
        name, seq, site = op[5], op[1], op[2]  # the op's label (x ** y), its seq, its site
        t = perf_counter_ns() - rec.t0
        tid = _thread_ident()
        for a, legs in uploads:
            api = suffix(name, a)
            hid = data_id(rec, a, None, op[3], op[4])
            for dst, nbytes in legs:
                rec.add_transfer((next(rec.seqs), t, tid, H2D, HOST, dst, nbytes, implicit, False,
                                  api, site, hid, seq))
    except Exception as exc:  # recording must never break the user's op
        rec.recording_failed(exc)


def inner_call(fn, args, kwargs, static_nums=(), static_names=()):
    """Run an inner dispatch ``fn`` of the op in flight, adding its host arguments' legs
    (none when the op counted its own host operands: ``CallSpec.depth``)."""
    if tls.depth == 2:
        return fn(*args, **kwargs)
    try:
        hosts = host_args(args, kwargs, static_nums, static_names)
    except Exception as exc:  # a pytree that fails to flatten: JAX says so itself, in fn
        hosts = []
        if active.rec is not None:
            active.rec.recording_failed(exc)
    if not hosts:
        return fn(*args, **kwargs)
    before = tls.inner
    tls.inner = True  # its own upload of them (a first call's Python path) is not one more
    try:
        out = fn(*args, **kwargs)
    finally:
        tls.inner = before
    if type(_trace_now.value) is _EvalTrace:
        record_inner(hosts, out)
    return out


class InnerPjit(JitProxy):
    """A jitted function of ``jax._src`` (``ufuncs.greater``, ``util._where``,
    ``array_creation._linspace``...) as seen from inside a recorded eager op: its host
    arguments are uploads of that op. Outside an op (or while tracing) a plain forward.
    Where ``capture/_wrap.c`` loaded, ``install_inner`` makes its ``InnerJit`` instead: the same
    decisions without this ``__call__``'s frame, which every ``x.sum()`` entered (its inner
    ``_reduce_sum``): +13 µs an op here (bench/README.md, round 20)."""

    __slots__ = ("_jitted", "_static", "__dict__", "__weakref__")

    def __init__(self, jitted):
        self._jitted = jitted
        self._static = _static_of(jitted)
        _copy_names(self, jitted)

    def __call__(self, *args, **kwargs):
        if tls.depth and tls.op is not None and active.rec is not None:
            return inner_call(self._jitted, args, kwargs, *self._static)
        return self._jitted(*args, **kwargs)



# jax._src modules whose module-level jitted helpers eager jnp code calls with host values
_INNER_MODULES = ("jax._src.numpy.", "jax._src.nn.", "jax._src.random", "jax._src.scipy.",
                  "jax._src.lax.")


def _static_of(jitted) -> tuple:
    info = getattr(jitted, "_jit_info", None)
    return (tuple(getattr(info, "static_argnums", ()) or ()), tuple(getattr(info, "static_argnames", ()) or ()))


def _copy_names(proxy, jitted) -> None:
    for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__"):
        try:
            setattr(proxy, attr, getattr(jitted, attr))
        except (AttributeError, TypeError):
            pass


def install_inner(patch, c_type=None) -> int:
    """Wrap the module-level ``PjitFunction`` helpers of ``jax._src``'s numpy/nn/random/scipy/
    lax modules (already imported) in ``InnerPjit`` (``c_type``: ``capture/_wrap.c``'s
    ``InnerJit``, where it loaded); ``patch`` records each original."""

    n = 0
    for modname, mod in list(sys.modules.items()):
        if mod is None or not modname.startswith(_INNER_MODULES):
            continue
        for attr, obj in list(vars(mod).items()):
            if type(obj).__name__ == "PjitFunction":
                if c_type is None:
                    proxy = InnerPjit(obj)
                else:
                    proxy = c_type(obj, None, inner_call, _static_of(obj))
                    _copy_names(proxy, obj)
                patch(mod, attr, proxy)
                n += 1
    return n


def jit_static(fn):
    """(static argnums, static argnames) of a ``PjitFunction``, or None for other callables.
    A ``custom_jvp``/``custom_vjp`` of a jitted function (``jax.nn.relu``) is that function:
    applied eagerly it calls it with the same arguments, which uploads them (JAX's guard logs
    ``relu(numpy)`` as one leg); its nondiff arguments are static, as the rule's own."""
    if type(fn).__name__ in ("custom_jvp", "custom_vjp") and type(getattr(fn, "fun", None)).__name__ == "PjitFunction":
        if getattr(fn, "nondiff_argnums", ()):
            return None  # their positions differ from the jitted function's: left to inner dispatches
        fn = fn.fun
    if type(fn).__name__ != "PjitFunction":
        return None
    info = getattr(fn, "_jit_info", None)
    return (tuple(getattr(info, "static_argnums", ()) or ()),
            tuple(getattr(info, "static_argnames", ()) or ()))


def dropped_host_args(primitive, params, args) -> frozenset:
    """Positions of host values among an eagerly bound ``jit`` primitive's arguments that its
    program drops as unused (JAX's own ``pxla._dce_jaxpr``, cached by JAX): never uploaded, no
    leg (a jit inside a ``jax.grad`` gets such a constant in its backward pass: diffrax's
    ``BacksolveAdjoint``). Empty for any other primitive, or when it cannot be told."""
    if primitive.name != "jit" or "jaxpr" not in params or not any(is_host(a) for a in args):
        return frozenset()
    try:
        from jax._src.interpreters import pxla

        _, _, kept = pxla._dce_jaxpr(params["jaxpr"], params.get("keep_unused", False),
                                     tuple(params.get("donated_invars", (False,) * len(args))))
        return frozenset(i for i, a in enumerate(args) if i not in kept and is_host(a))
    except Exception:  # another JAX
        return frozenset()


def python_ints(values) -> tuple:
    """``values`` as Python ints (each an upload of a scalar), or none when one is not an int:
    a recording never breaks the user's op."""
    try:
        return tuple(int(v) for v in values)
    except (TypeError, ValueError):
        return ()


NOTHING_DROPPED = frozenset()


def dropped_leaves(fn, spec, args, kwargs=None) -> frozenset:
    """Indexes of a jit call's dynamic argument leaves (``tree_leaves((args, kwargs))`` without
    the static ones: the operands the hooks walk) that the call itself neither uploads nor moves,
    so no leg of it: those its compiled program drops as unused (common.kept_leaves) — a Python
    scalar, NumPy data or an array on another device alike — and all of them for a policy's
    per-op run, which records the legs it makes itself. By position: the same object may be
    passed at a kept and at a dropped position (``f(x, c, c)``: the guard logs one leg)."""
    if not spec.flatten:
        return NOTHING_DROPPED
    if type(fn).__name__ != "PjitFunction":  # (a jitted function is never a per-op run: asked after)
        if getattr(fn, "moves_its_operands", False):  # a policy's per-op run (engine.py): its legs are recorded
            return frozenset(range(len(tree_leaves((args, kwargs or {})))))  # as it makes them, not here again
        if type(getattr(fn, "__wrapped__", None)).__name__ == "PjitFunction":
            fn = fn.__wrapped__  # a policy runs it on its device (engine._on_device)
        else:
            return _compiled_dropped(getattr(fn, "__self__", None), args, kwargs)
    kept, leaves = kept_leaves(fn, spec, args, kwargs or {})
    return NOTHING_DROPPED if kept is None else frozenset(range(len(leaves))).difference(kept)


_COMPILED_DROPPED = weakref.WeakKeyDictionary()


def _compiled_dropped(compiled, args, kwargs) -> frozenset:
    """The same for a call of a ``jax.stages.Compiled`` (``jit.install_compiled``): the None
    entries of its input shardings (``common.input_shardings``). Its arguments' structure is
    fixed (JAX refuses another), so once per compiled object."""
    if type(compiled).__name__ != "Compiled":  # any other callable (an adopted jit): no raise-and-catch a call
        return NOTHING_DROPPED
    try:
        dropped = _COMPILED_DROPPED.get(compiled)
        if dropped is None:
            shardings = input_shardings(compiled, None, args, kwargs, tree_leaves((args, kwargs or {})))
            dropped = _COMPILED_DROPPED[compiled] = frozenset(i for i, s in enumerate(shardings) if s is None)
        return dropped
    except Exception:  # not a Compiled's call, another JAX
        return NOTHING_DROPPED
