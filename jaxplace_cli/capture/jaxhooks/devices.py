"""What JAX sees: platform, id, kind, process and memory of each device."""
from __future__ import annotations

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


def initialised_devices() -> list[dict]:
    """``describe_devices`` of the devices JAX has initialised; [] when no backend is up yet
    (asking ``jax.devices()`` would initialise one: a run that never used JAX stays so)."""
    try:
        from jax._src import xla_bridge

        if not xla_bridge.backends_are_initialized():
            return []
        import jax

        return describe_devices(jax.devices())
    except Exception:
        return []
