"""The library API: ``device_placement(policy)``, ``where(x)`` and ``install_jax_alias()``.

``device_placement`` works without ``jaxplace run``: if the hooks are not installed it
installs them with a bounded in-memory recorder (nothing is written anywhere) and removes
them when the outermost context exits. It is per thread (other threads keep their own
placement), nestable (the innermost wins) and restores the previous state on exit and on
exceptions.

Jit functions made before the hooks (a module-level ``@jax.jit`` above the ``with`` block,
under plain python) are JAX's own and never reach the hooks. When ``device_placement``
installs the hooks itself, it wraps those it can find — the global names of the module that
entered the block — for the duration, so they are placed as under ``jaxplace run``; one held
only in a local variable cannot be rewrapped, and a warning says so, once per function.
"""
from __future__ import annotations

import sys
import threading
import warnings
from contextlib import contextmanager

from jaxplace_cli.capture.jaxhooks.engine import RAISE, Placer
from jaxplace_cli.placement.devices import parse_device_spec
from jaxplace_cli.placement.policies import load_policy

_install_lock = threading.Lock()
_owned = {"depth": 0}
_adopted: list = []  # (namespace dict, name, original, wrapper) restored at the outermost exit
_warned: set = set()


class PlacementWarning(UserWarning):
    """A jit function device_placement cannot place (made before the hooks, held locally)."""


def make_placer(policy, devices=None, on_error: str = RAISE, granularity: str = "unit") -> Placer:
    names = parse_device_spec(devices) if isinstance(devices, str) else devices
    if granularity not in ("unit", "op"):
        raise ValueError(f"granularity must be 'unit' or 'op', not {granularity!r}")
    if on_error not in ("raise", "fallback"):
        raise ValueError(f"on_error must be 'raise' or 'fallback', not {on_error!r}")
    return Placer(load_policy(policy), names, on_error, granularity)


@contextmanager
def device_placement(policy, *, devices=None, on_error: str = RAISE, granularity: str = "unit"):
    """Place every JAX op dispatched in this block (on this thread) by ``policy``.

    ``policy``: any form ``--policy`` accepts ("rr", "pin:cpu:1", "rules.toml",
    "file.py:name"), a Python callable, or a Policy. ``devices``: restrict the devices used
    ("gpu", "cpu:0,cpu:1" or a list). ``on_error="fallback"``: when the policy fails, let JAX
    decide and record it instead of raising ``PolicyError``.
    """
    from jaxplace_cli.capture.jaxhooks import install
    from jaxplace_cli.capture.jaxhooks.state import active, tls
    from jaxplace_cli.capture.recorder import Recorder

    placer = make_placer(policy, devices, on_error, granularity)
    with _install_lock:
        if active.rec is None:
            install(Recorder(maxlen=100_000))
            _owned["depth"] = 1
            _adopt_caller_jits()
        elif _owned["depth"]:
            _owned["depth"] += 1
    previous = tls.placer
    tls.placer = placer
    active.placing = True  # stays on once used: then each op checks its thread's placer
    try:
        yield placer
    finally:
        tls.placer = previous
        with _install_lock:
            if _owned["depth"]:
                _owned["depth"] -= 1
                if _owned["depth"] == 0:
                    from jaxplace_cli.capture.jaxhooks import uninstall

                    uninstall()
                    _restore_jits()


def _caller_frame():
    """The first frame outside jaxplace and contextlib: the code that entered the block."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_globals.get("__name__") or "").split(".")[0] in ("jaxplace_cli", "contextlib"):
        frame = frame.f_back
    return frame


def _adopt_caller_jits() -> None:
    from jaxplace_cli.capture.jaxhooks.adopt import adopt, is_unhooked_jit

    frame = _caller_frame()
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
    for name, obj in frame.f_locals.items():
        if is_unhooked_jit(obj) and namespace.get(name) is not obj and id(obj) not in _warned:
            _warned.add(id(obj))
            warnings.warn(
                f"jaxplace: device_placement cannot place jit function {name!r}: it was made with "
                "jax.jit before jaxplace's hooks were installed and is held in a local variable, so "
                "its calls run where JAX decides; define it at module level (then it is placed), "
                "inside the with block, or run the script with `jaxplace run`",
                PlacementWarning, stacklevel=4)


def _restore_jits() -> None:
    while _adopted:
        namespace, name, original, wrapper = _adopted.pop()
        if namespace.get(name) is wrapper:  # the script did not rebind it meanwhile
            namespace[name] = original


def install_jax_alias() -> None:
    """Make ``jax.device_placement`` name jaxplace's ``device_placement``, so code written as
    ``with jax.device_placement(policy):`` runs. It is jaxplace's API, not JAX's (JAX has
    ``jax.default_device`` and ``device_put`` only). Never replaces an attribute JAX itself
    defines. ``jaxplace run`` calls it as soon as the script imports JAX."""
    import jax

    if not hasattr(jax, "device_placement"):
        jax.device_placement = device_placement


def where(x):
    """Where arrays live: ``"cpu:1"`` for an array, the same structure of labels for a
    pytree, ``"host"`` for numpy data; multi-device arrays give ``"cpu:0,cpu:1"``."""
    import jax

    from jaxplace_cli.capture.jaxhooks.state import sharding_label

    def one(leaf):
        if isinstance(leaf, jax.Array):
            return sharding_label(leaf.sharding)
        return "host"

    return jax.tree_util.tree_map(one, x)
