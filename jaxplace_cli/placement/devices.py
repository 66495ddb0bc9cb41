"""Device names (``cpu:1``, ``gpu``) -> jax Devices, with errors that list what exists.

Resolution is lazy: JAX backends must not be initialised before the user's script runs
(``jax.distributed.initialize`` would fail), so names are checked for syntax up front and
resolved at the first decision.
"""
from __future__ import annotations

import re

from jaxplace_cli.model.events import device_label
from jaxplace_cli.placement.errors import PolicyLoadError

_NAME = re.compile(r"^[a-z]+(:\d+)?$")


def check_name(name: str, where: str) -> str:
    """Syntax check of a device name or platform (``cpu:0``, ``gpu``, ``jax``)."""
    if not isinstance(name, str) or not _NAME.match(name.strip().lower()):
        raise PolicyLoadError(f"{where}: {name!r} is not a device name (write e.g. \"cpu:0\", \"gpu:1\" or \"gpu\")")
    return name.strip().lower()


def parse_device_spec(spec: str | None) -> list[str] | None:
    """``--devices SPEC``: ``gpu``, ``cpu:0,cpu:1`` -> names (None = every device)."""
    if spec is None or spec == "":
        return None
    return [check_name(part, "--devices") for part in spec.split(",") if part.strip()]


def all_devices() -> list:
    """Every device of every initialised platform (CPU last when an accelerator exists)."""
    import jax

    devs = list(jax.devices())
    if devs and devs[0].platform != "cpu":
        try:
            devs += [d for d in jax.devices("cpu") if d not in devs]
        except RuntimeError:
            pass
    return devs


def select(names: list[str] | None) -> list:
    """The devices named by a ``--devices`` spec (platform names expand to all its devices)."""
    devs = all_devices()
    if names is None:
        return devs
    by_label = {device_label(d): d for d in devs}
    out = []
    for n in names:
        if ":" in n:
            if n not in by_label:
                raise LookupError(f"device {n} is not present (available: {', '.join(by_label)})")
            out.append(by_label[n])
        else:
            match = [d for d in devs if d.platform == n]
            if not match:
                raise LookupError(f"no {n} devices are present (available: {', '.join(by_label)})")
            out.extend(match)
    return list(dict.fromkeys(out))


def resolve(target, allowed: list):
    """A policy's answer -> a Device in ``allowed``; raises LookupError with the choices."""
    import jax

    if isinstance(target, jax.Device):
        dev = target
    elif isinstance(target, str):
        name = target.strip().lower()
        cands = [d for d in allowed if device_label(d) == name or (":" not in name and d.platform == name)]
        if not cands:
            raise LookupError(f"device {target!r} is not present or not allowed "
                              f"(allowed: {', '.join(device_label(d) for d in allowed)})")
        dev = cands[0]
    else:
        raise TypeError(f"a policy must return a jax.Device, a device name or None, not {type(target).__name__}")
    if dev not in allowed:
        raise LookupError(f"device {device_label(dev)} is not allowed "
                          f"(allowed: {', '.join(device_label(d) for d in allowed)})")
    return dev
