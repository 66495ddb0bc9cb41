"""Jit functions made before jaxplace's hooks were installed.

Under ``jaxplace run`` every ``jax.jit`` the script makes is a recording ``JitFunction``: the
hooks are in before the script starts. Under plain python, ``device_placement`` (or
``budget()``) installs the hooks when its block is entered, so a module-level ``@jax.jit``
defined before the block is JAX's own ``PjitFunction``, whose calls never reach Python — the
policy would silently not place them (issue 14). ``adopt`` wraps such a function in the same
``JitFunction`` ``jax.jit`` would have returned under the hooks (same op name, same static
arguments), so it is placed and recorded exactly as under ``jaxplace run``.

``adopt_caller_jits`` does that for the global names of the module that entered the block
(``capture/recording.py`` calls it when the block installs the hooks) and ``restore_jits``
puts JAX's functions back when the hooks are removed. One held only in a local variable
cannot be rewrapped: a ``PlacementWarning`` says so, once per function.
"""
from __future__ import annotations

import sys
import warnings

from jaxplace_cli.capture.frames import local_items
from jaxplace_cli.model.events import OP_JIT

_LIBRARIES = ("jax", "jaxlib", "jaxplace_cli", "flax", "optax", "equinox", "haiku")
_adopted: list = []  # (namespace dict, name, original, wrapper), restored by restore_jits
_warned: set = set()  # ids of the local jit functions already warned about


class PlacementWarning(UserWarning):
    """A jit function device_placement cannot place (made before the hooks, held locally)."""


def is_unhooked_jit(obj) -> bool:
    """A ``jax.jit`` function of the user's own code made without the hooks. JAX's own jitted
    functions (``jnp.tanh`` imported by name) are not: the module hooks cover those."""
    if type(obj).__name__ != "PjitFunction" or not hasattr(obj, "_jit_info"):
        return False
    module = getattr(getattr(obj, "__wrapped__", None), "__module__", "") or ""
    return module.split(".", 1)[0] not in _LIBRARIES


def adopt(obj):
    """``obj`` (a PjitFunction) as the JitFunction ``jax.jit`` returns under the hooks."""
    from jaxplace_cli.capture.jaxhooks.dispatch import CallSpec
    from jaxplace_cli.capture.jaxhooks.jit import jit_function, jit_name

    info = obj._jit_info
    spec = CallSpec(jit_name(getattr(obj, "__wrapped__", obj)), OP_JIT, scalar_operands=True, flatten=True,
                    static_argnums=tuple(info.static_argnums or ()),
                    static_argnames=tuple(info.static_argnames or ()))
    return jit_function(obj, spec)


def _caller_frame():
    """The first frame outside jaxplace and contextlib (the code that entered the block) and
    the ``stacklevel`` that makes a warning point at it from our caller."""
    frame, level = sys._getframe(2), 2
    while frame is not None and (frame.f_globals.get("__name__") or "").split(".")[0] in ("jaxplace_cli", "contextlib"):
        frame, level = frame.f_back, level + 1
    return frame, level


def adopt_caller_jits() -> None:
    """Wrap the unhooked jit functions among the caller's module globals until restore_jits."""
    frame, level = _caller_frame()
    if frame is None:
        return
    namespace = frame.f_globals
    for name, obj in list(namespace.items()):
        if is_unhooked_jit(obj):
            wrapper = adopt(obj)
            namespace[name] = wrapper
            _adopted.append((namespace, name, obj, wrapper))
    if frame.f_locals is namespace:
        return
    for name, obj in local_items(frame):
        if is_unhooked_jit(obj) and namespace.get(name) is not obj and id(obj) not in _warned:
            _warned.add(id(obj))
            warnings.warn(
                f"jaxplace: device_placement cannot place jit function {name!r}: it was made with "
                "jax.jit before jaxplace's hooks were installed and is held in a local variable, so "
                "its calls run where JAX decides; define it at module level (then it is placed), "
                "inside the with block, or run the script with `jaxplace run`",
                PlacementWarning, stacklevel=level)


def restore_jits() -> None:
    """Put JAX's own functions back where adopt_caller_jits replaced them."""
    while _adopted:
        namespace, name, original, wrapper = _adopted.pop()
        if namespace.get(name) is wrapper:  # the script did not rebind it meanwhile
            namespace[name] = original
