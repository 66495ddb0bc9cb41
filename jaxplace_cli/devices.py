"""What JAX sees: platform, id, kind, process and memory of each device."""
from __future__ import annotations

from .events import device_label


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
