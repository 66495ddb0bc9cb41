"""Device balance: op time per device, devices that did nothing while others were busy.

Pure functions over ``{device: DeviceLoad}`` so the same judgement applies to a jaxplace run
(host-side dispatch time of recorded ops) and to a foreign trace (device execution time from
the profiler) — the finding says which time it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from jaxplace_cli.analysis.rules.base import INFO, WARNING, Finding
from jaxplace_cli.model.sizes import human_ns


@dataclass
class DeviceLoad:
    ops: int = 0
    ns: int = 0
    top_site: int = 0  # the site with most of this device's time (runs only; 0 = unknown)
    site_ns: dict = field(default_factory=dict)


def balance_findings(loads: dict[str, DeviceLoad], devices: list[str], cfg, time_kind: str,
                     sites: dict | None = None, select=("imbalance", "idle-device"),
                     copying: set[str] | frozenset = frozenset(),
                     table_ops: dict[str, int] | None = None) -> list[Finding]:
    """``imbalance``: among devices that ran ops, the busiest spent at least
    ``cfg.imbalance_ratio`` times the time of the least busy one (and ran at least
    ``cfg.imbalance_min_ops`` ops, so two stray ops are not a pattern). ``idle-device``:
    devices that exist but ran nothing while others did — info when the program used one
    device (a single-device program on a multi-device machine), warning when it spread work
    over several devices and still left some idle. ``copying``: devices that took part in
    transfers, named as such among the idle ones (they moved data but computed nothing).
    ``table_ops``: ops per device as the ops table counts them (a run's: transfers and
    partitioned calls too), said beside the compute ops when they differ (issue 26)."""
    used = [d for d in devices if loads.get(d, DeviceLoad()).ops > 0]
    used += [d for d in loads if d not in used and loads[d].ops > 0]
    out = []
    if "imbalance" in select and len(used) >= 2:
        busiest = max(used, key=lambda d: (loads[d].ns, loads[d].ops))
        least = min(used, key=lambda d: (loads[d].ns, loads[d].ops))
        hi, lo = loads[busiest], loads[least]
        if hi.ops >= cfg.imbalance_min_ops and hi.ns >= cfg.imbalance_ratio * max(lo.ns, 1):
            ratio = hi.ns / max(lo.ns, 1)
            times = f"{ratio:.1f}x" if ratio < 1000 else "over 1000x"
            share = hi.ns / max(sum(loads[d].ns for d in used), 1)
            file, line = "", 0
            if sites is not None and hi.top_site:
                s = sites.get(hi.top_site)
                file, line = (s.file, s.line) if s else ("", 0)
            per_dev = ", ".join(f"{d} {loads[d].ops} ops / {human_ns(loads[d].ns)}" for d in used)
            out.append(Finding(
                "imbalance", WARNING,
                f"{busiest} ran {hi.ops} ops ({human_ns(hi.ns)}, {share:.0%} of the time), "
                f"{times} the least busy device {least} ({lo.ops} ops, {human_ns(lo.ns)}); "
                f"per device: {per_dev}; time = {time_kind}",
                file, line, hi.ops, 0,
                fix="spread independent work over the devices (--policy rr, or a rules file "
                    "that sends some ops elsewhere), or shard the batch (jax.sharding)",
                time_ns=hi.ns, devices=list(used)))
    idle = [d for d in devices if d not in used]
    if "idle-device" in select and used and idle:
        busy = ", ".join(used[:8]) + (f" and {len(used) - 8} more" if len(used) > 8 else "")
        total_ops = sum(loads[d].ops for d in used)
        n_used = len(used)
        copied = [d for d in idle if d in copying]
        also = (f"; {', '.join(copied)} only took part in transfers" if copied else "")
        out.append(Finding(
            "idle-device", INFO if n_used == 1 else WARNING,
            f"{len(idle)} of {len(devices)} devices ran no ops ({', '.join(idle)}) while "
            f"{busy} ran {ops_text(total_ops, table_ops, used)}{also}",
            count=len(idle),
            fix=("this program uses one device; to use the others, shard the data "
                 "(jax.sharding) or place independent work with --policy rr"
                 if n_used == 1 else
                 "give the idle devices work (--policy rr, a rules file, or sharding), or "
                 "run on fewer devices"),
            devices=idle))
    return out


def ops_text(compute: int, table_ops: dict[str, int] | None, devices) -> str:
    """``42 ops``, or ``42 compute ops (46 in the ops table, with device_put/device_get)`` when the
    ops table of the same devices counts more: the finding's number and the table's agree."""
    table = sum((table_ops or {}).get(d, 0) for d in devices)
    if table_ops is None or table == compute:
        return f"{compute:,} ops"
    return f"{compute:,} compute ops ({table:,} in the ops table, with device_put/device_get)"
