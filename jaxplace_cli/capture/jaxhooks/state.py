"""State shared by the hook modules: the active recorder and per-thread nesting.

Nesting rule ("outermost call wins"): when a hooked call (``jnp.mean``, a jit call,
``device_put``) runs, everything JAX dispatches inside it belongs to it, so inner hooked
calls pass straight through. ``tls.depth`` counts that; ``tls.op`` names the op in flight so a
host read that happens *inside* an op (JAX reading a concrete value) is attributed to it.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from jaxplace_cli.model.events import OP_JNP, device_group_label, device_label


class _TLS(threading.local):
    depth = 0
    in_device_get = False  # jax.device_get records its reads itself (transfers.py)
    op = None  # (name, seq, site, args, kwargs, api, spec) of the hooked call in flight on this thread
    placer = None  # innermost device_placement() on this thread (None: the global --policy)
    # While an explicit placement API runs (device_put, make_array_from_*): the list its
    # per-device legs are collected into (uploads.py), else None
    collect = None
    # Inside a host callback's body (callbacks.py): its arrays live on JAX's CPU device in
    # host memory, staged there by the callback's own d2h; reading them moves nothing more
    host_side = False
    # While an inner dispatch that counted its host arguments runs (legs.inner_call): an upload
    # of them below it (JAX's Python dispatch path) is not another leg
    inner = False


def _thread_state():
    """``capture/_native.c``'s ``ThreadState`` where the native path runs (a C struct a thread in
    the thread's own state: record_call's stores of ``depth`` and ``op`` cost a fifth of what they
    cost through this threading.local subclass, measured there), else ``_TLS``: the same
    attributes, defaults and lifetime (a thread's values go with the thread)."""
    from jaxplace_cli.capture import native

    make = getattr(native.module(), "thread_state", None)  # (None: an extension built before it)
    return make() if make is not None else _TLS()


tls = _thread_state()


class _Active:
    """Holds the recorder while hooks are installed (None = hooks are inert). Slots: the C hot
    path reads ``rec``, ``placing`` and ``on_dispatch`` on every op (capture/_native.c `field`)."""

    __slots__ = ("rec", "tracing", "on_dispatch", "placer", "placing")

    def __init__(self) -> None:
        self.rec = None
        self.tracing = False  # a jax.profiler trace is being captured: also emit TraceAnnotations
        self.on_dispatch = None  # optional callable run at each recorded op (trace window timer)
        self.placer = None  # placement engine of --policy; None = JAX decides
        self.placing = False  # any placer set anywhere (skips the per-thread lookup when False)


active = _Active()

_LABELS: dict = {}


def label(device) -> str:
    """Cached ``cpu:0`` label of a jax Device (device objects are hashable and long-lived)."""
    s = _LABELS.get(device)
    if s is None:
        s = _LABELS[device] = device_label(device)
    return s


def sharding_label(sharding) -> str:
    """Device label(s) of a sharding: ``cpu:0`` or ``cpu:0,cpu:1`` for multi-device."""
    dev = getattr(sharding, "_device", None)
    if dev is not None:
        return label(dev)
    try:
        return ",".join(label(d) for d in sharding._device_assignment)
    except Exception:
        return "?"


def endpoint_label(sharding) -> str:
    """A transfer endpoint: ``cpu:0``, or for a sharding over several devices the group form
    ``cpu:0-7`` (model.events.device_group_label: no comma, so ``src>dst`` routes parse)."""
    dev = getattr(sharding, "_device", None)
    if dev is not None:
        return label(dev)
    try:
        return device_group_label([label(d) for d in sharding._device_assignment])
    except Exception:
        return "?"


def wraps(original):
    """``functools.wraps`` that also takes C++ (nanobind) functions, whose ``__qualname__`` is
    not a string: what can be copied is, the rest is left."""

    def deco(fn):
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                value = getattr(original, attr)
                if attr == "__doc__" or isinstance(value, str):
                    setattr(fn, attr, value)
            except (AttributeError, TypeError):
                pass
        fn.__wrapped__ = original
        return fn

    return deco


HOST_DATA_FUNCTIONS = frozenset({"array", "asarray"})
HOST_DATA_APIS = frozenset({"jnp.array", "jnp.asarray"})  # their labels (public_api)


def public_api(name: str) -> str:
    """The public call behind a jax.numpy-family op name (the prefixes of jaxhooks'
    WRAPPED_MODULES): ``zeros`` -> ``jnp.zeros``, ``linalg.inv`` -> ``jnp.linalg.inv``,
    ``random.key`` -> ``jax.random.key``, ``nn.relu`` -> ``jax.nn.relu``, ``scipy.special.erf``
    -> ``jax.scipy.special.erf``. Only a transfer's label: the op keeps its name, which
    policies and rules files match (issue 24 item 4)."""
    if name.startswith(("random.", "nn.", "scipy.")):
        return "jax." + name
    return "jnp." + name


class CallSpec:
    """How a wrapped callable's arguments are read: which are operands, which are static."""

    __slots__ = ("name", "kind", "scalar_operands", "flatten", "static_argnums", "static_argnames",
                 "scalars", "scalar_api", "host_data", "index", "api", "depth", "placed_by_jax", "foreign")

    def __init__(self, name, kind, scalar_operands=False, flatten=False,
                 static_argnums=(), static_argnames=(), api=None):
        self.name = name
        # a transfer's label: x + y for the operator named add, jnp.zeros for zeros
        self.api = api or (public_api(name) if kind == OP_JNP else name)
        self.kind = kind
        self.scalar_operands = scalar_operands  # Python scalars are data (x + 1.0), not shapes
        self.flatten = flatten  # arguments/results are arbitrary pytrees (jit calls)
        self.static_argnums = frozenset(static_argnums)
        self.static_argnames = frozenset(static_argnames)
        self.scalars = scalar_operands or flatten  # a Python scalar operand is an upload
        self.scalar_api = self.api + " (Python scalar)"  # made once, not per upload
        # tls.depth while it runs: 2 for an op that is one dispatch of its operands and counts
        # their legs itself (x + 1.0), so that the dispatch inside adds none (legs.inner_call);
        # 1 for the others, whose inner dispatches' legs are theirs (a jit call's callbacks)
        self.depth = 1
        # jnp.array / jnp.asarray: Python values (lists, scalars) are the data, uploaded whole
        self.host_data = kind == OP_JNP and name in HOST_DATA_FUNCTIONS
        self.index = False  # x[idx]: its uploads follow from the index (dispatch.index_uploads)
        # a program compiled ahead of time runs where it was compiled: no policy places it
        self.placed_by_jax = False
        # an operator that counts its own host operands: the spec of a call with an operand JAX
        # converts itself (``foreign_operand``), whose legs only its inner dispatches see
        self.foreign = None

    def plain_twin(self) -> CallSpec:
        """This spec as a plain function's: its inner dispatches count their host arguments
        (``x * v`` where ``v.__jax_array__()`` returns NumPy data, or uploads some itself)."""
        twin = CallSpec(self.name, self.kind, api=self.api)
        twin.index, twin.placed_by_jax = self.index, self.placed_by_jax
        return twin


def foreign_operand(args) -> bool:
    """Whether an operand of an operator call is an object JAX converts by its ``__jax_array__``
    (a flax ``nnx.Variable``): the operator calls it, then dispatches what it returned. Looked up
    in the dicts of the type's MRO, as ``capture/_native.c`` does (``_PyType_Lookup``): no
    ``__getattr__`` of the instance or its metaclass is run."""
    for a in args:
        t = type(a)
        if t not in _PLAIN_OPERANDS:
            for k in t.__mro__:
                if "__jax_array__" in k.__dict__:
                    if k.__dict__["__jax_array__"] is not None:
                        return True
                    break
    return False


def static_positions(nums, n: int) -> set:
    """The argument positions ``static_argnums`` names in a call of ``n`` positional arguments,
    read as JAX reads them: -2 is the second from the end; out of range names none."""
    return {i % n for i in nums if -n <= i < n}


HOST_DATA_TYPES = (np.ndarray, np.generic)
PY_SCALARS = (int, float, bool, complex)
_PLAIN_OPERANDS = frozenset((*PY_SCALARS, np.ndarray))


def _inert_after_fork() -> None:
    """A fork child inherits the hooks and the recorder, but not the writer thread that drains
    it: recording there would only grow memory. The hooks go inert: the child runs as under
    plain python, unrecorded and unplaced (JAX decides; JAX itself warns that forking a
    process that started JAX is unsafe)."""
    active.rec = None
    active.on_dispatch = None
    active.tracing = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_inert_after_fork)
