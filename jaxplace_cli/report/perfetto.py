"""The run in Chrome's trace event format (JSON), which ui.perfetto.dev and chrome://tracing open.

- a process per lane: ``host`` and each device (``process_name``, in lane order);
- ops: complete events (``ph: X``) on their device's process, one thread per Python thread
  that dispatched them, with kind, site, placement and error as args; the bar is the host-side
  dispatch (device time is not recorded by jaxplace's hooks);
- transfers: a short slice on the ``transfers`` thread of the source and of the destination
  process, tied by a flow (``ph: s`` at the source, ``ph: f``, ``bp: e`` at the destination):
  both ends always exist, so the viewer draws every arrow. Slices that would start at the same
  nanosecond on one lane are laid one nanosecond apart (a jit call's 32 scalar uploads share
  its start), so they never nest;
- findings: instant events (``ph: i``) at each of their moments (at the run's start when
  a finding has none); steps: slices on the host's ``steps`` thread; compiles: instants on
  the host's ``compiles`` thread.

Times are microseconds (the format's unit) from the run's first event, with ns precision.

A ``jax.distributed`` job is its processes' runs side by side: each process's lanes are
processes of their own, named ``p<i> host``, ``p<i> cpu:2048``, each run timed from its own
first event (the processes' clocks are not aligned by jaxplace).
"""
from __future__ import annotations

import bisect
import json

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.sizes import human_bytes

TID_TRANSFERS, TID_STEPS, TID_COMPILES = 0, 1, 2  # op threads start at 10
FIRST_OP_TID = 10


def _us(ns: int) -> float:
    return ns / 1000.0


def events(result: AuditResult, tl, label: str = "", base: int = 1, flow0: int = 0):
    """Yield the trace's events, metadata first: dicts, except ops and transfers, which come as
    their JSON text already (formatted here from pre-encoded names: ~4x faster than encoding
    2M dicts of a 1M-event run one by one). A job's process ``label`` (``p1``) has its lanes
    from pid ``base`` on and its flow ids from ``flow0 + 1``."""
    lanes = tl.lanes
    for i, lane in enumerate(lanes):
        name = f"{label} {lane}" if label else lane
        yield {"ph": "M", "name": "process_name", "pid": i + base, "tid": 0, "args": {"name": name}}
        yield {"ph": "M", "name": "process_sort_index", "pid": i + base, "tid": 0,
               "args": {"sort_index": i + base - 1}}
        yield {"ph": "M", "name": "thread_name", "pid": i + base, "tid": TID_TRANSFERS, "args": {"name": "transfers"}}
    yield {"ph": "M", "name": "thread_name", "pid": base, "tid": TID_STEPS, "args": {"name": "steps"}}
    yield {"ph": "M", "name": "thread_name", "pid": base, "tid": TID_COMPILES, "args": {"name": "compiles"}}
    o, t = tl.ops, tl.transfers
    tids: dict[int, int] = {}
    for th in list(o["thread"]) + list(t["thread"]):
        tids.setdefault(th, FIRST_OP_TID + len(tids))
    site_j = [_j(site_name(f, line) if f else "") for f, line, _ in tl.sites]
    yield from _ops(tl, tids, site_j, base)
    yield from _transfers(tl, site_j, base, flow0)
    yield from _steps(tl, base)
    yield from _compiles(tl, base)
    yield from _findings(result, tl, tids, base)
    yield from _memory(result, tl, base)


_j = json.JSONEncoder(ensure_ascii=True).encode


def _ops(tl, tids: dict, site_j: list, base: int):
    o = tl.ops
    names, kinds = [_j(n) for n in tl.names], [_j(k) for k in tl.op_kinds]
    placed = ["," + '"placed":' + _j(p) if p else "" for p in tl.op_placed]
    errors = ["," + '"error":' + _j(e) if e else "" for e in tl.op_errors]
    named = set()
    for lane, thread, ts, dur, n, k, site, seq, pl, err in zip(o["lane"], o["thread"], o["ts"], o["dur"], o["name"],
                                                                 o["kind"], o["site"], o["seq"], o["placed"], o["err"]):
        pid, tid = lane + base, tids[thread]
        if (pid, tid) not in named:
            named.add((pid, tid))
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                   "args": {"name": f"ops (python thread {tid - FIRST_OP_TID})"}}
        yield (f'{{"ph":"X","name":{names[n]},"cat":"op","pid":{pid},"tid":{tid},"ts":{ts / 1000!r},'
               f'"dur":{dur / 1000!r},"args":{{"kind":{kinds[k]},"site":{site_j[site]},"seq":{seq}'
               f'{placed[pl]}{errors[err]}}}}}')


def _transfers(tl, site_j: list, base: int, flow0: int):
    t, lanes = tl.transfers, [_j(x) for x in tl.lanes]
    kinds = ("h2d", "d2h", "d2d", "?")
    apis = [_j(a) for a in tl.apis]
    sizes: dict[int, str] = {}
    free: dict[int, int] = {}  # lane -> first ns free on its transfers thread
    for i, (ts, src, dst, k, nbytes, flags, site, api, seq) in enumerate(zip(
            t["ts"], t["src"], t["dst"], t["kind"], t["bytes"], t["flags"], t["site"], t["api"], t["seq"])):
        kind = kinds[k]
        size = sizes.get(nbytes)
        if size is None:
            size = sizes[nbytes] = human_bytes(nbytes)
        args = (f'{{"kind":"{kind}","bytes":{nbytes},"src":{lanes[src]},"dst":{lanes[dst]},'
                f'"implicit":{"true" if flags & 1 else "false"},"blocking":{"true" if flags & 2 else "false"},'
                f'"api":{apis[api]},"site":{site_j[site]},"seq":{seq}}}')
        at_src = max(ts, free.get(src, 0))
        free[src] = at_src + 1
        at_dst = at_src if dst == src else max(ts, free.get(dst, 0))
        free[dst] = at_dst + 1
        for lane, at in ((src, at_src), (dst, at_dst)) if src != dst else ((src, at_src),):
            yield (f'{{"ph":"X","name":"{kind} {size}","cat":"transfer","pid":{lane + base},"tid":{TID_TRANSFERS},'
                   f'"ts":{at / 1000!r},"dur":0.001,"args":{args}}}')
        yield (f'{{"ph":"s","id":{flow0 + i + 1},"name":"transfer","cat":"transfer","pid":{src + base},"tid":{TID_TRANSFERS},'
               f'"ts":{at_src / 1000!r}}}')
        yield (f'{{"ph":"f","bp":"e","id":{flow0 + i + 1},"name":"transfer","cat":"transfer","pid":{dst + base},'
               f'"tid":{TID_TRANSFERS},"ts":{at_dst / 1000!r}}}')


def _steps(tl, base: int):
    st = tl.steps
    labels = st.get("labels", [])
    for i, (a, b) in enumerate(zip(st.get("start", []), st.get("end", []))):
        yield {"ph": "X", "name": labels[i] if i < len(labels) else f"step {i}", "cat": "step", "pid": base,
               "tid": TID_STEPS, "ts": _us(a), "dur": _us(max(0, b - a)),
               "args": {"step": i, "warmup": i < st.get("warmup", 0)}}


def _compiles(tl, base: int):
    c = tl.compiles
    for ts, name, secs in zip(c.get("ts", []), c.get("name", []), c.get("secs", [])):
        yield {"ph": "i", "s": "t", "name": f"compile {name}", "cat": "compile", "pid": base, "tid": TID_COMPILES,
               "ts": _us(ts), "args": {"seconds": secs}}


def _findings(result: AuditResult, tl, tids: dict, base: int):
    o, t = tl.ops, tl.transfers
    for i, f in enumerate(result.findings):
        m = tl.moments.get(f"finding:{i}", {"ops": [], "transfers": []})
        args = {"message": f.message, "fix": f.fix, "site": site_name(f.file, f.line) if f.file else "",
                "severity": f.severity}
        name = f"{f.severity}: {f.rule}"
        if not m["ops"] and not m["transfers"]:
            yield {"ph": "i", "s": "g", "name": name, "cat": "finding", "pid": base, "tid": TID_TRANSFERS,
                   "ts": 0.0, "args": args}
        for j in m["ops"]:
            yield {"ph": "i", "s": "t", "name": name, "cat": "finding", "pid": o["lane"][j] + base,
                   "tid": tids[o["thread"][j]], "ts": _us(o["ts"][j]), "args": args}
        for j in m["transfers"]:
            yield {"ph": "i", "s": "t", "name": name, "cat": "finding", "pid": t["dst"][j] + base,
                   "tid": TID_TRANSFERS, "ts": _us(t["ts"][j]), "args": args}


def _memory(result: AuditResult, tl, base: int):
    """A "device memory" counter track per device (issue 27): live bytes of the run's
    jax.Arrays, each change at the time of the last op or transfer drawn at or before it."""
    mem = getattr(result, "memory", None)
    if mem is None:
        return
    times = sorted(zip(list(tl.ops["seq"]) + list(tl.transfers["seq"]), list(tl.ops["ts"]) + list(tl.transfers["ts"])))
    seqs = [s for s, _ in times]
    lanes = {lane: i for i, lane in enumerate(tl.lanes)}
    for d in mem.devices:
        if d.device not in lanes:
            continue
        for seq, nbytes in d.series:
            i = bisect.bisect_right(seqs, seq) - 1
            ts = times[i][1] if i >= 0 else 0
            yield {"ph": "C", "name": "device memory", "pid": lanes[d.device] + base, "tid": 0, "ts": ts / 1000,
                   "args": {"bytes": nbytes}}


def write(path: str, parts, fh) -> int:
    """Write the trace of ``parts`` (``Audit.timelines()``: ``(label, result, timeline)`` per
    run, one for a run, one per process of a job) to text file ``fh``, one event per line;
    returns the number of events."""
    fh.write('{"displayTimeUnit":"ns","otherData":')
    how = "; ".join(f"{label}: {tl.detail.how}" if label else tl.detail.how for label, _, tl in parts)
    fh.write(json.dumps({"tool": "jaxplace", "run": path, "detail": how}))
    fh.write(',"traceEvents":[\n')
    n, base, flow0 = 0, 1, 0
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
    for label, result, tl in parts:
        for ev in events(result, tl, label, base, flow0):
            fh.write((",\n" if n else "") + (ev if isinstance(ev, str) else dumps(ev)))
            n += 1
        base += len(tl.lanes)
        flow0 += len(tl.transfers["ts"])
    fh.write("\n]}\n")
    return n
