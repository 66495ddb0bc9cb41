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
"""
from __future__ import annotations

import json

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.sizes import human_bytes

TID_TRANSFERS, TID_STEPS, TID_COMPILES = 0, 1, 2  # op threads start at 10
FIRST_OP_TID = 10


def _us(ns: int) -> float:
    return ns / 1000.0


def events(result: AuditResult, tl):
    """Yield the trace's events (dicts), metadata first."""
    lanes = tl.lanes
    for i, lane in enumerate(lanes):
        yield {"ph": "M", "name": "process_name", "pid": i + 1, "tid": 0, "args": {"name": lane}}
        yield {"ph": "M", "name": "process_sort_index", "pid": i + 1, "tid": 0, "args": {"sort_index": i}}
        yield {"ph": "M", "name": "thread_name", "pid": i + 1, "tid": TID_TRANSFERS, "args": {"name": "transfers"}}
    yield {"ph": "M", "name": "thread_name", "pid": 1, "tid": TID_STEPS, "args": {"name": "steps"}}
    yield {"ph": "M", "name": "thread_name", "pid": 1, "tid": TID_COMPILES, "args": {"name": "compiles"}}
    o, t = tl.ops, tl.transfers
    tids: dict[int, int] = {}
    for th in list(o["thread"]) + list(t["thread"]):
        tids.setdefault(th, FIRST_OP_TID + len(tids))
    named = set()
    site_text = [site_name(f, line) if f else "" for f, line, _ in tl.sites]
    for i in range(len(o["ts"])):
        pid, tid = o["lane"][i] + 1, tids[o["thread"][i]]
        if (pid, tid) not in named:
            named.add((pid, tid))
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                   "args": {"name": f"ops (python thread {tid - FIRST_OP_TID})"}}
        args = {"kind": tl.op_kinds[o["kind"][i]], "site": site_text[o["site"][i]], "seq": o["seq"][i]}
        if tl.op_placed[o["placed"][i]]:
            args["placed"] = tl.op_placed[o["placed"][i]]
        if tl.op_errors[o["err"][i]]:
            args["error"] = tl.op_errors[o["err"][i]]
        yield {"ph": "X", "name": tl.names[o["name"][i]], "cat": "op", "pid": pid, "tid": tid,
               "ts": _us(o["ts"][i]), "dur": _us(o["dur"][i]), "args": args}
    kinds = ("h2d", "d2h", "d2d", "?")
    free: dict[int, int] = {}  # lane -> first ns free on its transfers thread
    for i in range(len(t["ts"])):
        src, dst, nbytes, flags = t["src"][i], t["dst"][i], t["bytes"][i], t["flags"][i]
        kind = kinds[t["kind"][i]]
        name = f"{kind} {human_bytes(nbytes)}"
        args = {"kind": kind, "bytes": nbytes, "src": lanes[src], "dst": lanes[dst],
                "implicit": bool(flags & 1), "blocking": bool(flags & 2), "api": tl.apis[t["api"][i]],
                "site": site_text[t["site"][i]], "seq": t["seq"][i]}
        at = {}
        for lane in (src, dst):
            ts = at[lane] = max(t["ts"][i], free.get(lane, 0))
            free[lane] = ts + 1
        for lane in dict.fromkeys((src, dst)):
            yield {"ph": "X", "name": name, "cat": "transfer", "pid": lane + 1, "tid": TID_TRANSFERS,
                   "ts": _us(at[lane]), "dur": 0.001, "args": args}
        yield {"ph": "s", "id": i + 1, "name": "transfer", "cat": "transfer", "pid": src + 1,
               "tid": TID_TRANSFERS, "ts": _us(at[src])}
        yield {"ph": "f", "bp": "e", "id": i + 1, "name": "transfer", "cat": "transfer", "pid": dst + 1,
               "tid": TID_TRANSFERS, "ts": _us(at[dst])}
    yield from _steps(tl)
    yield from _compiles(tl)
    yield from _findings(result, tl, tids)


def _steps(tl):
    st = tl.steps
    labels = st.get("labels", [])
    for i, (a, b) in enumerate(zip(st.get("start", []), st.get("end", []))):
        yield {"ph": "X", "name": labels[i] if i < len(labels) else f"step {i}", "cat": "step", "pid": 1,
               "tid": TID_STEPS, "ts": _us(a), "dur": _us(max(0, b - a)),
               "args": {"step": i, "warmup": i < st.get("warmup", 0)}}


def _compiles(tl):
    c = tl.compiles
    for ts, name, secs in zip(c.get("ts", []), c.get("name", []), c.get("secs", [])):
        yield {"ph": "i", "s": "t", "name": f"compile {name}", "cat": "compile", "pid": 1, "tid": TID_COMPILES,
               "ts": _us(ts), "args": {"seconds": secs}}


def _findings(result: AuditResult, tl, tids: dict):
    o, t = tl.ops, tl.transfers
    for i, f in enumerate(result.findings):
        m = tl.moments.get(f"finding:{i}", {"ops": [], "transfers": []})
        args = {"message": f.message, "fix": f.fix, "site": site_name(f.file, f.line) if f.file else "",
                "severity": f.severity}
        name = f"{f.severity}: {f.rule}"
        if not m["ops"] and not m["transfers"]:
            yield {"ph": "i", "s": "g", "name": name, "cat": "finding", "pid": 1, "tid": TID_TRANSFERS,
                   "ts": 0.0, "args": args}
        for j in m["ops"]:
            yield {"ph": "i", "s": "t", "name": name, "cat": "finding", "pid": o["lane"][j] + 1,
                   "tid": tids[o["thread"][j]], "ts": _us(o["ts"][j]), "args": args}
        for j in m["transfers"]:
            yield {"ph": "i", "s": "t", "name": name, "cat": "finding", "pid": t["dst"][j] + 1,
                   "tid": TID_TRANSFERS, "ts": _us(t["ts"][j]), "args": args}


def write(result: AuditResult, tl, fh) -> int:
    """Write the trace to text file ``fh`` one event per line; returns the number of events."""
    fh.write('{"displayTimeUnit":"ns","otherData":')
    fh.write(json.dumps({"tool": "jaxplace", "run": result.path, "detail": tl.detail.how}))
    fh.write(',"traceEvents":[\n')
    n = 0
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
    for ev in events(result, tl):
        fh.write((",\n" if n else "") + dumps(ev))
        n += 1
    fh.write("\n]}\n")
    return n
