"""CPU-only traces: no device plane, so devices and op time come from the host threads.

XLA's CPU runtime runs each HLO op on a host thread and records it there, with the stats
``hlo_op`` and ``device_ordinal``; those events are the device's ops. Host and CPU devices
share memory, so the CPU runtime records no transfer events.
"""
from __future__ import annotations

from collections import Counter

from jaxplace_cli.sources.xplane.common import stats, to_int

SOURCE = "host events with hlo_op and device_ordinal (cpu)"
NOTE = ("no device plane (a CPU trace): devices and op time come from HLO ops run on host "
        "threads; the CPU runtime records no transfer events (host and CPU devices share memory)")
NO_DEVICE_NOTE = "no device plane and no executed HLO op: the trace shows no device"


def cpu_ops(host_planes) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """(devices, op_ns, op_count) of a CPU-only trace, from host events that carry both
    ``hlo_op`` and ``device_ordinal`` (the CPU runtime's per-op events)."""
    ns: Counter = Counter()
    cnt: Counter = Counter()
    for pl in host_planes:
        for ln in pl.lines:
            if ln.name.startswith("python"):
                continue  # the Python tracer's frames: no HLO ops there
            for e in ln.events:
                if e.name.startswith(("$", "ThreadpoolListener")):
                    continue
                st = stats(e)
                if "hlo_op" in st and "device_ordinal" in st:
                    o = to_int(st["device_ordinal"])
                    if o is not None:
                        ns[o] += e.duration_ns
                        cnt[o] += 1
    devs = sorted(cnt)
    return ([f"cpu:{o}" for o in devs], {f"cpu:{o}": int(ns[o]) for o in devs},
            {f"cpu:{o}": cnt[o] for o in devs})
