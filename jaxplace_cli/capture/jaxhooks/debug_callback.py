"""``jax.debug.callback`` under a placement policy: the callback sees where the policy put its
arguments.

The usual way to check a placement is a debug callback that prints the array's device
(``print(f"Array on {x.device()}")``). Under JAX alone that cannot work: the callback gets
host-side copies (on cpu:0, wherever the argument lived: measured on JAX 0.10.2 with the
argument on cpu:1), and ``Array.device`` is a property, so ``x.device()`` raises
``TypeError: 'Device' object is not callable``.

While a jaxplace placement is active (``device_placement`` on this thread, or ``--policy``), an
eager ``jax.debug.callback`` hands the callback a ``PlacedArray`` for each array argument: the
array JAX gave, whose ``device`` is the device the argument lived on when the callback was
called — the one the policy chose — and is callable too, so ``x.device`` and ``x.device()``
both work. The callback op itself is not placed (a policy would otherwise move the data to
print it). Without a placement, and for callbacks inside traced (jit) code, JAX's own
function runs untouched.
"""
from __future__ import annotations

import functools
import operator

import jax
from jax.tree_util import tree_flatten, tree_unflatten

from jaxplace_cli.capture.frames import drop_own
from jaxplace_cli.capture.jaxhooks.state import active, tls


class CallableDevice:
    """A jax Device that can also be called (``x.device()``, the older spelling): returns itself."""

    __slots__ = ("_device",)

    def __init__(self, device):
        self._device = device

    def __call__(self):
        return self

    def __getattr__(self, name):
        return getattr(self._device, name)

    def __eq__(self, other):
        return self._device == (other._device if isinstance(other, CallableDevice) else other)

    def __hash__(self):
        return hash(self._device)

    def __repr__(self):
        return repr(self._device)

    def __str__(self):
        return str(self._device)


class PlacedArray:
    """An array argument of a debug callback, with the device the policy put it on."""

    __slots__ = ("_array", "_device")

    def __init__(self, array, device):
        self._array = array
        self._device = CallableDevice(device)

    @property
    def device(self):
        return self._device

    def devices(self):
        return {self._device._device}

    def __getattr__(self, name):
        return getattr(self._array, name)

    def __array__(self, *args, **kwargs):
        return self._array.__array__(*args, **kwargs)

    def __jax_array__(self):
        return self._array

    def __repr__(self):
        return repr(self._array)

    def __str__(self):
        return str(self._array)

    def __format__(self, spec):
        return format(self._array, spec)

    def __len__(self):
        return len(self._array)

    def __iter__(self):
        return iter(self._array)

    def __getitem__(self, index):
        return self._array[index]

    def __bool__(self):
        return bool(self._array)

    def __float__(self):
        return float(self._array)

    def __int__(self):
        return int(self._array)

    def __index__(self):
        return operator.index(self._array)


def _delegate(name):
    def method(self, *args):
        return getattr(self._array, name)(*args)

    method.__name__ = name
    return method


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "pow",
            "matmul", "rmatmul", "neg", "abs", "eq", "ne", "lt", "le", "gt", "ge"):
    setattr(PlacedArray, f"__{_op}__", _delegate(f"__{_op}__"))
PlacedArray.__hash__ = None  # arrays are unhashable


def _device(x):
    devs = x.devices()
    return next(iter(devs)) if len(devs) == 1 else None


def make_debug_callback(original):
    """Replacement for ``jax.debug.callback`` (see the module docstring)."""

    @functools.wraps(original)
    def callback(fn, *args, **kwargs):
        placer = (tls.placer or active.placer) if active.placing else None
        if active.rec is None or placer is None or not callable(fn):
            return original(fn, *args, **kwargs)
        own = {k: v for k, v in kwargs.items() if k not in ("ordered", "partitioned")}  # debug.callback's
        flat, _ = tree_flatten((args, own))
        if any(isinstance(x, jax.core.Tracer) for x in flat):
            return original(fn, *args, **kwargs)
        devices = [_device(x) if isinstance(x, jax.Array) else None for x in flat]

        @functools.wraps(fn)
        def shown(*a, **k):
            got, tree = tree_flatten((a, k))
            if len(got) == len(devices):
                got = [PlacedArray(g, d) if d is not None and isinstance(g, jax.Array) else g
                       for g, d in zip(got, devices)]
                a, k = tree_unflatten(tree, got)
            try:
                return fn(*a, **k)
            except BaseException as exc:  # JAX logs it: without this frame
                drop_own(exc)
                raise

        depth, tls.depth = tls.depth, 1  # the callback op is not placed (nor recorded)
        try:
            return original(shown, *args, **kwargs)
        finally:
            tls.depth = depth

    callback.__jaxplace_original__ = original
    return callback
