"""Device names (``cpu:1``, ``gpu``) -> jax Devices, with errors that list what exists.

Resolution is lazy: JAX backends must not be initialised before the user's script runs
(``jax.distributed.initialize`` would fail), so names are checked for syntax up front and
resolved at the first decision.
"""
from __future__ import annotations

import os
import re

from jaxplace_cli.model.events import device_label
from jaxplace_cli.placement.errors import PolicyLoadError

_NAME = re.compile(r"^[a-z]+(:\d+)?$")
# Platform names ``jax.devices(platform)`` knows; "gpu" is CUDA or ROCm. Anything else in a
# device name ("two", "gpus") is a typo, said before the run starts.
PLATFORMS = ("cpu", "gpu", "cuda", "rocm", "tpu")
_GPU = ("gpu", "cuda", "rocm")
# The XLA flag ``--devices N`` sets: how many CPU devices the host platform simulates.
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def without_device_count(flags: str) -> list[str]:
    """The flags of an ``XLA_FLAGS`` value less the simulated CPU device count."""
    return [f for f in flags.split() if not f.startswith(DEVICE_COUNT_FLAG)]


def check_name(name: str, where: str) -> str:
    """Syntax check of a device name or platform (``cpu:0``, ``gpu``, ``jax``)."""
    if not isinstance(name, str) or not _NAME.match(name.strip().lower()):
        raise PolicyLoadError(f"{where}: {name!r} is not a device name (write e.g. \"cpu:0\", \"gpu:1\" or \"gpu\")")
    return name.strip().lower()


def available_platforms() -> set[str]:
    """The platforms this process's JAX can have, decided *without* initialising a backend
    (``jax.distributed.initialize`` must still be possible when the script starts): the
    ``JAX_PLATFORMS`` variable when set, else the CPU plus the accelerators whose PJRT plugin
    (``jax_plugins`` entry points or namespace packages) or ``libtpu`` is installed. A plugin
    installed on a machine without the hardware still counts: that case fails at the first
    op, as before; a machine with no such plugin cannot have the device."""
    env = os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME") or ""
    if env.strip():
        named = {p.strip().lower() for p in env.split(",") if p.strip()}
        return named | ({"gpu"} if named & set(_GPU) else set())
    found = {"cpu"}
    import importlib.metadata
    import importlib.util

    names = {ep.name.lower() for ep in importlib.metadata.entry_points(group="jax_plugins")}
    try:
        import pkgutil

        spec = importlib.util.find_spec("jax_plugins")
        if spec is not None and spec.submodule_search_locations:
            names |= {m.name.lower() for m in pkgutil.iter_modules(spec.submodule_search_locations)}
    except (ImportError, ValueError):
        pass
    if any(k in n for n in names for k in ("cuda", "rocm")):
        found |= {"gpu", "cuda", "rocm"}
    if any("tpu" in n for n in names) or importlib.util.find_spec("libtpu") is not None:
        found.add("tpu")
    return found


def cpu_device_count(simulated: int | None = None) -> int:
    """CPU devices JAX will have: ``--devices N``, else the count XLA_FLAGS or
    JAX_NUM_CPU_DEVICES force, else 1 (JAX's default)."""
    if simulated:
        return simulated
    m = re.search(DEVICE_COUNT_FLAG + r"=(\d+)", os.environ.get("XLA_FLAGS", ""))
    if m:
        return max(int(m.group(1)), 1)
    n = os.environ.get("JAX_NUM_CPU_DEVICES", "")
    return max(int(n), 1) if n.isdigit() else 1


def static_check(names, where: str, simulated: int | None = None) -> None:
    """What can be known about device names before JAX starts: the platform exists in JAX
    and on this machine, a CPU index is below the CPU count. PolicyLoadError otherwise, so a
    typo is one line and no run directory is made (``--devices two``, ``--devices gpu`` on a
    CPU-only machine, ``pin:cpu:7`` with 4 CPU devices)."""
    have = None
    for name in names or ():
        platform, _, index = name.partition(":")
        if platform not in PLATFORMS:
            what = ("neither a number of simulated CPU devices (--devices 2) nor a device spec"
                    if where == "--devices" else "not a device")
            raise PolicyLoadError(f"{where}: {name!r} is {what}: write a platform ({', '.join(PLATFORMS)}) "
                                  f"or platform:index, e.g. cpu:1 or gpu,cpu:0")
        have = available_platforms() if have is None else have
        if platform not in have:
            raise PolicyLoadError(f"{where}: no {platform} devices on this machine (JAX here has: "
                                  f"{', '.join(sorted(have))}); with --devices N, N simulated CPU devices")
        if platform == "cpu" and index and int(index) >= cpu_device_count(simulated):
            n = cpu_device_count(simulated)
            raise PolicyLoadError(f"{where}: {name} does not exist: this run has {n} CPU device"
                                  f"{'s' if n != 1 else ''} (cpu:0{f'..cpu:{n - 1}' if n > 1 else ''}); "
                                  "--devices N simulates N (also for a script that sets jax_num_cpu_devices)")


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
