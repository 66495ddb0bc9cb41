"""The library API: ``device_placement(policy)`` and ``where(x)``.

``device_placement`` works without ``jaxplace run``: if the hooks are not installed it
installs them with a bounded in-memory recorder (nothing is written anywhere) and removes
them when the outermost context exits. It is per thread (other threads keep their own
placement), nestable (the innermost wins) and restores the previous state on exit and on
exceptions.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from jaxplace_cli.capture.jaxhooks.engine import RAISE, Placer
from jaxplace_cli.placement.devices import parse_device_spec
from jaxplace_cli.placement.policies import load_policy

_install_lock = threading.Lock()
_owned = {"depth": 0}


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
