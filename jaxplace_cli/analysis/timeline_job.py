"""A ``jaxplace launch`` job's timeline: its processes' timelines as one, a lane group each.

Each process records on its own clock (``perf_counter_ns`` from its own start), so the groups
are aligned on each process's first event, not on a shared wall clock; the page says so.
Lanes are named ``p<i> <lane>`` and ``groups`` says which lanes are whose. The parts must be
complete (every event drawn): a part with a level of detail has buckets on its own time grid,
which do not merge; ``merge_timelines`` returns None then and the page points at the
per-process reports. Moments are left out: the job's merged findings are not one process's.
"""
from __future__ import annotations

from jaxplace_cli.analysis.timeline import Detail, Timeline, steady_range


def _reindex(table: list, values: list[int], into: list, index: dict) -> list[int]:
    """``values`` index ``table``; the same values as indexes into the merged ``into``."""
    local = []
    for v in table:
        key = tuple(v) if isinstance(v, list) else v
        if key not in index:
            index[key] = len(into)
            into.append(v)
        local.append(index[key])
    return [local[v] for v in values]


def merge_timelines(parts: list[tuple[str, object, Timeline | None]]) -> Timeline | None:  # long: one pass per column
    """``Audit.timelines()`` of a job -> one Timeline (lanes ``p<i> host``, ...), with
    ``groups`` [(label, [lane indexes])]; None when a part is missing or not complete."""
    if not parts or any(tl is None or not tl.detail.complete for _, _, tl in parts):
        return None
    lanes, groups = [], []
    tables = {k: ([], {}) for k in ("names", "apis", "sites", "op_kinds", "op_placed", "op_errors")}
    ops = {k: [] for k in ("seq", "lane", "ts", "dur", "name", "kind", "site", "err", "placed", "thread")}
    trs = {k: [] for k in ("seq", "ts", "src", "dst", "kind", "bytes", "flags", "site", "api", "thread")}
    compiles = {"ts": [], "name": [], "secs": [], "total": 0}
    detail = Detail(complete=True, ops_total=0, transfers_total=0)
    for label, _, tl in parts:
        o, t = tl.ops, tl.transfers
        # the lanes this process drew on (a process's summary lists the job's other devices too)
        used = sorted({0, *o["lane"], *t["src"], *t["dst"]})
        lane = {old: len(lanes) + i for i, old in enumerate(used)}
        groups.append((label, list(lane.values())))
        lanes += [f"{label} {tl.lanes[x]}" for x in used]
        for k in ("seq", "ts", "dur", "thread"):
            ops[k] += o[k]
        ops["lane"] += [lane[x] for x in o["lane"]]
        for col, table in (("name", "names"), ("kind", "op_kinds"), ("site", "sites"), ("err", "op_errors"),
                           ("placed", "op_placed")):
            ops[col] += _reindex(getattr(tl, table), o[col], *tables[table])
        for k in ("seq", "ts", "kind", "bytes", "flags", "thread"):
            trs[k] += t[k]
        trs["src"] += [lane[x] for x in t["src"]]
        trs["dst"] += [lane[x] for x in t["dst"]]
        trs["site"] += _reindex(tl.sites, t["site"], *tables["sites"])
        trs["api"] += _reindex(tl.apis, t["api"], *tables["apis"])
        for k in ("ts", "name", "secs"):
            compiles[k] += tl.compiles.get(k, [])
        compiles["total"] += tl.compiles.get("total", 0)
        for k in ("ops_total", "transfers_total", "ops_shown", "transfers_shown"):
            setattr(detail, k, getattr(detail, k) + getattr(tl.detail, k))
    span = max(tl.t1 - tl.t0 for _, _, tl in parts)
    detail.how = (f"every op and transfer of the job's {len(parts)} processes ({detail.ops_total + detail.transfers_total:,} "
                  "events) is drawn, one lane group per process; each process's clock starts at its own first "
                  "event (the processes share no clock)")
    first = parts[0][2]  # SPMD processes step together: the steps of process 0 mark the axis
    merged = Timeline(lanes, 0, span, ops, trs, tables["names"][0], tables["apis"][0],
                      [tuple(s) for s in tables["sites"][0]], detail, steps=first.steps, compiles=compiles,
                      op_kinds=tables["op_kinds"][0], op_placed=tables["op_placed"][0],
                      op_errors=tables["op_errors"][0])
    merged.steady = steady_range(first.steps, max(1, span))
    merged.groups = groups
    return merged
