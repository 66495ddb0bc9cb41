"""Merging the audits of a job's processes (analysis/distributed.py): summaries, steps, findings.

Pure functions over the processes' ``AuditResult``s; the rules for what adds up and what does
not are in analysis/distributed.py's docstring.
"""
from __future__ import annotations

from dataclasses import replace

from jaxplace_cli.analysis.findings import Finding
from jaxplace_cli.analysis.steps import KindStepStats
from jaxplace_cli.analysis.summary import DeviceOps, KindTotal, Summary, TransferSite
from jaxplace_cli.model.events import TRANSFER_KINDS


def device_order(name: str):
    """``cpu:2`` before ``cpu:10``: devices sort by kind, then by number."""
    kind, _, num = name.partition(":")
    return (kind, int(num) if num.isdigit() else 0, name)


def group_order(names: str):
    """``cpu:0`` < ``cpu:0,cpu:1`` < ``cpu:1`` < ``cpu:2048``: comma-joined device groups."""
    return tuple(device_order(x) for x in names.split(","))


def local_devices(devices: str, index: int, owner: dict[str, int]) -> str:
    """The devices of a recorded call that belong to process ``index`` (all when unknown): a
    jit call over a global mesh lists the whole mesh, but runs on the caller's devices only."""
    names = [x for x in devices.split(",") if x]
    mine = [x for x in names if owner.get(x) == index]
    return ",".join(mine) if mine and len(mine) < len(names) else devices


def merge_summaries(indexed: list[tuple[Summary, int]], top_sites: int, owner: dict) -> Summary:
    """One Summary of the processes' (``(summary, process index)`` pairs): counts, bytes and
    routes add up; a site is merged across processes; each call is put on its own process's
    devices of the mesh (``owner``: device -> process)."""
    parts = [p for p, _ in indexed]
    totals = {k: KindTotal(sum(p.totals[k].count for p in parts), sum(p.totals[k].bytes for p in parts))
              for k in TRANSFER_KINDS}
    small = {k: KindTotal(sum(p.small[k].count for p in parts), sum(p.small[k].bytes for p in parts))
             for k in TRANSFER_KINDS}
    unknown = {k: sum(p.unknown_size.get(k, 0) for p in parts) for k in TRANSFER_KINDS}
    sites: dict[tuple, TransferSite] = {}
    small_sites: dict[tuple, TransferSite] = {}
    for p, index in indexed:
        for listed, into in ((p.sites, sites), (p.small_sites, small_sites)):
            for t in listed:
                key = (t.kind, t.file, t.line, t.function, t.api, t.implicit, t.blocking)
                mine = {">".join(local_devices(x, index, owner) for x in r.split(">")) for r in t.routes}
                m = into.get(key)
                if m is None:
                    into[key] = replace(t, routes=sorted(mine))
                else:
                    m.count, m.bytes = m.count + t.count, m.bytes + t.bytes
                    m.small_count, m.small_bytes = m.small_count + t.small_count, m.small_bytes + t.small_bytes
                    m.routes = sorted(set(m.routes) | mine)
    for key in set(small_sites) & set(sites):  # small at one process, both sizes at another
        t = small_sites.pop(key)
        sites[key].small_count += t.small_count
        sites[key].small_bytes += t.small_bytes
    routes: dict[tuple, object] = {}
    for p, index in indexed:
        for r in p.routes:
            src, dst = local_devices(r.src, index, owner), local_devices(r.dst, index, owner)
            m = routes.get((r.kind, src, dst))
            if m is None:
                routes[(r.kind, src, dst)] = replace(r, src=src, dst=dst)
            else:
                for f in ("count", "bytes", "small_count", "small_bytes", "unknown_size", "blocking"):
                    setattr(m, f, getattr(m, f) + getattr(r, f))
    devices = list(dict.fromkeys(d for p in parts for d in p.devices))
    by_dev: dict[str, DeviceOps] = {}
    for p, index in indexed:  # a call runs on the caller's own devices of the mesh
        for d in p.ops_by_device:
            label = local_devices(d.device, index, owner)
            m = by_dev.get(label)
            if m is None:
                by_dev[label] = replace(d, device=label, top=list(d.top))
            else:
                top = dict(m.top)
                for name, n in d.top:
                    top[name] = top.get(name, 0) + n
                m.count, m.dispatch_ns = m.count + d.count, m.dispatch_ns + d.dispatch_ns
                m.top = sorted(top.items(), key=lambda kv: (-kv[1], kv[0]))[:len(d.top) or 5]
    order = {k: i for i, k in enumerate(TRANSFER_KINDS)}
    return Summary(parts[0].min_bytes, totals, small, unknown,
                   sorted(sites.values(), key=lambda t: (-t.bytes, -t.count))[:top_sites],
                   sum(p.ops_total for p in parts), sorted(by_dev.values(), key=lambda d: group_order(d.device)),
                   sum(p.op_errors for p in parts), sorted(devices, key=device_order),
                   sorted(routes.values(), key=lambda r: (order.get(r.kind, 9), -r.bytes, -r.count, r.src, r.dst)),
                   small_sites=sorted(small_sites.values(), key=lambda t: (-t.small_bytes, -t.small_count))[:top_sites],
                   top_sites=top_sites)


def merge_steps(ok: list, notes: list[str]):
    """Steps of the first process that has any; per-step transfers summed over processes
    (``ok``: ProcessViews with a result) when every process has as many steps."""
    with_steps = [v for v in ok if v.result.steps is not None and v.result.steps.steps]
    if not with_steps:
        return ok[0].result.steps, ok[0].result.step_transfers
    ref = with_steps[0].result
    n = len(ref.steps.steps)
    if len(with_steps) < len(ok) or any(len(v.result.steps.steps) != n for v in with_steps):
        counts = ", ".join(f"p{v.index} {v.steps or 0}" for v in ok)
        notes.append(f"steps differ across processes ({counts}); per-step transfers are process "
                     f"{with_steps[0].index}'s alone")
        return ref.steps, ref.step_transfers
    merged = {k: KindStepStats([0] * n, [0] * n) for k in TRANSFER_KINDS}
    for v in with_steps:
        for k, st in v.result.step_transfers.items():
            if k in merged:
                merged[k].counts = [a + b for a, b in zip(merged[k].counts, st.counts)]
                merged[k].bytes = [a + b for a, b in zip(merged[k].bytes, st.bytes)]
    return ref.steps, merged


def merge_findings(views) -> list[Finding]:
    """The processes' findings; the same rule at the same line in several processes is one
    finding whose cost is the sum (the message is the first process's, and says so)."""
    groups: dict[tuple, list[tuple[int, Finding]]] = {}
    for v in views:
        for f in (v.result.findings if v.result else []):
            key = (f.rule, f.severity, f.file, f.line) if f.file else (f.rule, f.severity, f.message, v.index)
            groups.setdefault(key, []).append((v.index, f))
    out = []
    for hits in groups.values():
        idx = [i for i, _ in hits]
        f = hits[0][1]
        who = f"p{idx[0]}" if len(idx) == 1 else f"processes {', '.join(map(str, idx))}"
        msg = f"{who}: {f.message}" + (f" (as p{idx[0]} saw it; the cost is all {len(idx)} processes')"
                                       if len(idx) > 1 else "")
        out.append(replace(f, message=msg, count=sum(h.count for _, h in hits),
                           bytes=sum(h.bytes for _, h in hits), time_ns=sum(h.time_ns for _, h in hits),
                           devices=sorted({d for _, h in hits for d in h.devices}, key=device_order)))
    return out
