"""The library API: ``device_placement(policy)``, ``where(x)`` and ``install_jax_alias()``.

``device_placement`` works without ``jaxplace run``: it holds a ``capture.recording.Recording``,
which installs the hooks if no one holds them (recording into a bounded in-memory recorder:
nothing is written anywhere) and removes them when the last holder leaves. It is per thread
(other threads keep their own placement), nestable (the innermost wins) and restores the
previous state on exit and on exceptions.

Jit functions made before the hooks (a module-level ``@jax.jit`` above the ``with`` block,
under plain python) are JAX's own and never reach the hooks. When ``device_placement``
installs the hooks itself, it wraps those it can find — the global names of the module that
entered the block — for the duration, so they are placed as under ``jaxplace run``; one held
only in a local variable cannot be rewrapped, and a ``PlacementWarning`` says so, once per
function (``capture/jaxhooks/adopt.py``).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from jaxplace_cli.capture.jaxhooks.adopt import PlacementWarning

if TYPE_CHECKING:
    from jaxplace_cli.capture.jaxhooks.engine import Placer

# The engine, policies and rules parser are imported on use: `jaxplace run` imports this module
# when the script imports JAX (install_jax_alias), and most scripts never place (4 ms, issue 29).
RAISE = "raise"  # capture/jaxhooks/engine.py's RAISE

__all__ = ["PlacementWarning", "device_placement", "install_jax_alias", "make_placer", "where"]


def make_placer(policy, devices=None, on_error: str = RAISE, granularity: str = "unit") -> Placer:
    from jaxplace_cli.capture.jaxhooks.engine import Placer
    from jaxplace_cli.placement.devices import parse_device_spec
    from jaxplace_cli.placement.policies import load_policy

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
    from jaxplace_cli.capture.jaxhooks.state import active, tls
    from jaxplace_cli.capture.recording import Recording

    placer = make_placer(policy, devices, on_error, granularity)
    with Recording(adopt_jits=True):  # the hooks place only what they record
        previous = tls.placer
        tls.placer = placer
        active.placing = True  # stays on once used: then each op checks its thread's placer
        try:
            yield placer
        finally:
            tls.placer = previous


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
