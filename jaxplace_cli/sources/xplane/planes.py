"""The one pass over a trace's planes: op time per device, and the few events that can be copies.

Device planes (``/device:GPU:0``, ``/device:TPU:3``; custom planes skipped) give the devices.
Per device, one line family is summed so no time counts twice: the ``Stream #N`` lines (GPU
kernels; copy events set aside for :mod:`.pairing`), else the ``XLA Ops`` line (TPU; host
offload ``copy-start`` set aside for :mod:`.offload`, its ``copy-done`` not op time). The
``Steps`` line gives the step count. Host planes (``/host:CPU``) are only searched for copy
calls and TPU transfers.

Testing ``name[:1]`` (a cached one-char string) first is what keeps the pass cheap: substring
tests and dict lookups on every event would cost as much as reading the names (kernel and HLO
names can be 1000+ characters).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from jaxplace_cli.sources.xplane.offload import HOST_MEMORY_SPACE
from jaxplace_cli.sources.xplane.pairing import DEVICE_COPY
from jaxplace_cli.sources.xplane.rocm import BLIT_PREFIX

# First characters of every name recognized by cuda, rocm and tpu.
_DEVICE_FIRST = "MC_"  # Memcpy*, Copy*, __amd_rocclr_copyBuffer*
_HOST_FIRST = "Mcht"  # Memcpy*/MemCpyAsync, cuMemcpy*/cudaMemcpy*, hipMemcpy*, tpu::System::*

# Lines that aggregate or annotate other lines: never summed, or time would count twice.
STEPS_LINE = "Steps"
XLA_OPS_LINE = "XLA Ops"
STREAM_PREFIX = "Stream #"


class DevicePlane(NamedTuple):
    platform: str  # "gpu", "tpu", ... (lower case)
    index: int
    label: str  # "gpu:0"
    plane: object  # the ProfileData plane


def split_planes(planes) -> tuple[list[DevicePlane], list]:
    """(device planes sorted by platform and index, host planes)."""
    dev_planes, host_planes = [], []
    for pl in planes:
        pname = pl.name
        if pname.startswith("/device:"):
            parts = pname.split(":")
            if len(parts) == 3 and parts[2].isascii() and parts[2].isdigit() and parts[1] != "CUSTOM":
                plat = parts[1].lower()
                dev_planes.append(DevicePlane(plat, int(parts[2]), f"{plat}:{int(parts[2])}", pl))
        elif pname.startswith("/host:CPU"):
            host_planes.append(pl)
    dev_planes.sort(key=lambda t: (t[0], t[1]))
    return dev_planes, host_planes


@dataclass
class DeviceScan:
    """What the device planes hold. ``copy_events``: (platform, label, name, kind, event) of
    device copies (kind None for a blit kernel); ``offload_events``: (label, HLO text,
    start_ns) of ``copy-start`` ops touching host memory; ``op_sources``: which line families
    gave the op time."""

    op_ns: dict[str, int]
    op_count: dict[str, int]
    steps: int | None = None
    copy_events: list = field(default_factory=list)
    offload_events: list = field(default_factory=list)
    op_sources: set = field(default_factory=set)


def scan_devices(dev_planes: list[DevicePlane]) -> DeviceScan:
    """One pass over the chosen op lines of every device plane; other lines are not iterated."""
    scan = DeviceScan({d.label: 0 for d in dev_planes}, {d.label: 0 for d in dev_planes})
    for plat, _idx, label, pl in dev_planes:
        lines = list(pl.lines)
        op_lines = [ln for ln in lines if ln.name.startswith(STREAM_PREFIX)]
        if op_lines:
            scan.op_sources.add(f"'{STREAM_PREFIX}N' lines ({plat})")
        else:
            op_lines = [ln for ln in lines if ln.name == XLA_OPS_LINE]
            if op_lines:
                scan.op_sources.add(f"'{XLA_OPS_LINE}' line ({plat})")
        for ln in lines:
            if ln.name == STEPS_LINE:
                k = sum(1 for _ in ln.events)
                scan.steps = k if scan.steps is None else max(scan.steps, k)
        total, count = 0.0, 0
        for ln in op_lines:
            # one running float sum per device, in event order: the result is the same to the bit
            if ln.name == XLA_OPS_LINE:
                total, count = _xla_ops(ln, label, scan.offload_events, total, count)
            else:
                total, count = _stream(ln, plat, label, scan.copy_events, total, count)
        scan.op_ns[label] = int(total)
        scan.op_count[label] = count
    return scan


def _xla_ops(ln, label: str, offload_events: list, total: float, count: int) -> tuple[float, int]:
    for e in ln.events:
        n = e.name
        if n.startswith(("%copy-", "copy-")) and HOST_MEMORY_SPACE in n:
            if " copy-start(" in n:
                offload_events.append((label, n, e.start_ns))
                continue
            if " copy-done(" in n:
                continue  # the wait for that copy: transfer time, not op time
        total += e.duration_ns
        count += 1
    return total, count


def _stream(ln, plat: str, label: str, copy_events: list, total: float, count: int) -> tuple[float, int]:
    for e in ln.events:
        n = e.name
        if n[:1] in _DEVICE_FIRST:
            kind = DEVICE_COPY.get(n)
            if kind is not None or n.startswith(BLIT_PREFIX):
                copy_events.append((plat, label, n, kind, e))
                continue
        total += e.duration_ns
        count += 1
    return total, count


def host_candidates(host_planes) -> list[tuple[str, object]]:
    """(name, event) of host events that may be copy calls or TPU transfers: a one-character
    gate, then substring tests; stats are read later, only for these."""
    out = []
    for pl in host_planes:
        for ln in pl.lines:
            for e in ln.events:
                n = e.name
                if n[:1] in _HOST_FIRST and ("emcpy" in n or "Transfer" in n or "MemCpy" in n):
                    out.append((n, e))
    return out
