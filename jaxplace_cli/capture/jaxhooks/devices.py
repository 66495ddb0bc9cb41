"""What JAX sees: platform, id, kind, process and memory of each device."""
from __future__ import annotations

import sys

from jaxplace_cli.model.events import device_label


def describe_devices(devices) -> list[dict]:
    out = []
    for d in devices:
        info = {
            "name": device_label(d),
            "platform": d.platform,
            "id": d.id,
            "kind": getattr(d, "device_kind", "?"),
            "process": getattr(d, "process_index", 0),
            "memory_bytes": None,
        }
        try:
            stats = d.memory_stats()
            if stats and "bytes_limit" in stats:
                info["memory_bytes"] = int(stats["bytes_limit"])
        except Exception:
            pass
        out.append(info)
    return out


def backends_up() -> bool:
    """Whether JAX has started a backend. Asking for devices starts one: a script that never
    used a device (``--help``, an early error) must not have one started at its end, which
    on an accelerator is seconds and, on a GPU, most of its memory taken. False where this
    JAX cannot say: nothing is started then either, and JAX is not imported to ask (a script
    that never imported it: the end of its run must not import it)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:
        return False


def initialised_devices() -> list[dict]:
    """``describe_devices`` of the devices JAX has initialised; [] when no backend is up yet."""
    if not backends_up():
        return []
    try:
        import jax

        return describe_devices(jax.devices())
    except Exception:
        return []
