"""The run as a timeline: lanes, ops, transfers, steps, and the moments of findings and sites.

What the HTML report draws and the Perfetto export writes, built from jaxplace's own store
(every op and transfer, not the 100-op ``jax.profiler`` window). One lane per device plus a
``host`` lane; an op that ran on several devices (a sharded jit call) is a bar on each.

Level of detail: a run of up to ``DETAIL_MAX`` ops and transfers is drawn event by event.
A bigger run (a 1M-event run holds ~520k) keeps, individually, (1) one contiguous window of
whole steps from the first steady-state step (or the run's start), (2) up to ``MOMENTS_CAP``
moments of every finding and top transfer site, evenly spread over the run; and everything
as ``BUCKETS`` time buckets per lane and route (counts, bytes, dispatch time). The page says
which. ``DETAIL_MAX`` keeps the report of a 1M-event run under ~10 MB of HTML.

Device time: jaxplace's hooks record host-side dispatch only (JAX dispatches asynchronously);
device execution time is in the run's ``jax.profiler`` trace window (``jaxplace view``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.memory_view import memory_view
from jaxplace_cli.analysis.run import RunData
from jaxplace_cli.model.events import HOST, TRANSFER_KINDS
from jaxplace_cli.store import timeline as q

DETAIL_MAX = 150_000  # ops + transfers drawn one by one
MOMENTS_CAP = 1_000  # moments kept per finding / top site when the run is bigger than that
BUCKETS = 2_000  # time buckets of the aggregate view
COMPILES_CAP = 5_000
SOURCE_MAX_BYTES = 5 * 2**20  # a source file read for its line must be a .py file at most this big

# Rules whose moments are transfers (the rest point at ops: compiles, fwd/bwd, failed calls).
TRANSFER_RULES = {"pingpong", "host-sync-in-loop", "implicit-h2d-in-loop", "repeated-put", "uncommitted-copy"}


@dataclass
class Detail:
    complete: bool  # every op and transfer is in the arrays
    ops_total: int
    transfers_total: int
    ops_shown: int = 0  # op rows kept (a sharded op counts once)
    transfers_shown: int = 0
    window: tuple[int, int] | None = None  # (from, to) ns: every event in it is kept
    how: str = ""  # the level of detail, in words, for the page


@dataclass
class Timeline:
    lanes: list[str]
    t0: int  # ns of the first event; every time below is relative to it
    t1: int
    ops: dict[str, list]  # columns: seq lane ts dur name kind site err placed thread
    transfers: dict[str, list]  # columns: seq ts src dst kind bytes flags site api thread
    names: list[str]  # op names (ops["name"] indexes it)
    apis: list[str]
    sites: list[tuple[str, int, str]]  # (file, line, function); index 0 = unknown
    detail: Detail
    steps: dict = field(default_factory=dict)  # method, detail, warmup, start, end (ns lists)
    compiles: dict = field(default_factory=dict)  # ts, name, secs, total
    buckets: dict | None = None  # width, n, ops {lane: [[b, count, ns]]}, routes [[src, dst, kind, [[b, n, bytes]]]]
    moments: dict = field(default_factory=dict)  # "finding:i" / "site:i" -> {ops, transfers, total}
    op_kinds: list[str] = field(default_factory=list)  # ops["kind"] indexes these
    op_placed: list[str] = field(default_factory=list)  # ops["placed"]: "" = JAX decided
    op_errors: list[str] = field(default_factory=list)  # ops["err"]: "" = no error
    steady: tuple[int, int] = (0, 0)  # (from, to) ns: the first step after warm-up to the end
    groups: list = field(default_factory=list)  # a job's: [(process label, [lane indexes])]
    memory: list = field(default_factory=list)  # live bytes per device by time (analysis/memory_view.py)


def steady_range(steps: dict, span: int) -> tuple[int, int]:
    """The range a view opens on: from the first step after warm-up to the run's end (init and
    compile fill most of a run's start: issue 28); the whole run when no step is past warm-up."""
    starts, warmup = steps.get("start", []), steps.get("warmup", 0)
    if warmup >= len(starts):
        return (0, span)
    return (min(starts[warmup], span), span)


def build_timeline(run: RunData, result: AuditResult, detail_max: int = DETAIL_MAX,
                   moments_cap: int = MOMENTS_CAP) -> Timeline:
    """The timeline of ``run``, with the moments of ``result``'s findings and top sites."""
    conn = run.store.conn
    n_ops, n_tr = q.timeline_counts(conn)
    t0, t1 = q.timeline_span(conn)
    sites = run.store.sites()
    groups = _moment_groups(conn, result, sites)
    detail = Detail(complete=n_ops + n_tr <= detail_max, ops_total=n_ops, transfers_total=n_tr)
    if detail.complete:
        op_rows, tr_rows = list(q.op_rows(conn)), list(q.transfer_rows(conn))
        detail.how = f"every op and transfer ({n_ops + n_tr:,} events) is drawn individually"
    else:
        keep = {k: _spread(seqs, moments_cap) for k, seqs in groups.items()}
        wanted = set().union(*keep.values()) if keep else set()
        a, b = _window(conn, result, max(detail_max - len(wanted), detail_max // 2))
        op_rows = _merge(list(q.op_rows(conn, a, b)), q.op_rows_by_seq(conn, wanted))
        tr_rows = _merge(list(q.transfer_rows(conn, a, b)), q.transfer_rows_by_seq(conn, wanted))
        times = q.seq_times(conn, [a, b])
        wa = times.get(a, t0)
        wb = times.get(b) or q.last_time_before(conn, b) or t1
        detail.window = (wa - t0, wb - t0)
        detail.how = (f"this run has {n_ops + n_tr:,} ops and transfers: the timeline draws every one "
                      f"of them only in the detail window; elsewhere it draws {BUCKETS:,} time buckets "
                      f"per lane (counts, bytes, dispatch time), plus up to {moments_cap:,} moments of "
                      "each finding and top site, evenly spread over the run")
    tl = _columns(run, result, op_rows, tr_rows, t0, t1, detail, sites)
    if not detail.complete:
        tl.buckets = _buckets(conn, tl, t0, t1)
    tl.steps = _steps(conn, result, t0, t1)
    tl.steady = steady_range(tl.steps, max(1, t1 - t0))
    tl.compiles = _compiles(conn, t0)
    tl.moments = _moments(tl, groups)
    known = dict(zip(tl.ops["seq"], tl.ops["ts"])) | dict(zip(tl.transfers["seq"], tl.transfers["ts"]))
    tl.memory = memory_view(conn, getattr(result, "memory", None), known, t0)
    return tl


def _merge(window: list, extra: list) -> list:
    seen = {r[0] for r in window}
    return sorted(window + [r for r in extra if r[0] not in seen], key=lambda r: r[0])


def _spread(seqs: list[int], cap: int) -> list[int]:
    """At most ``cap`` of ``seqs``, evenly spread (the first and last always kept)."""
    if len(seqs) <= cap:
        return seqs
    step = (len(seqs) - 1) / (cap - 1)
    return [seqs[round(i * step)] for i in range(cap)]


def _window(conn, result: AuditResult, budget: int) -> tuple[int, int]:
    """Seq range of the detail window: whole steps from the first steady-state one (or the
    run's first event), at most ``budget`` seqs long (a seq is an op, a transfer or a marker)."""
    info = result.steps
    steps = info.steps if info is not None else []
    start = steps[min(info.warmup, len(steps) - 1)].start_seq if steps else 0
    end = start + budget
    ends = [s.end_seq for s in steps if start < s.end_seq <= end]
    return start, (ends[-1] if ends else end)


def _lane_of(lanes: list[str], index: dict, label: str) -> int:
    i = index.get(label)
    if i is None:
        first = label.split(",")[0] if label else HOST
        i = index.get(first)
        if i is None:
            lanes.append(first)
            i = index[first] = len(lanes) - 1
        index[label] = i
    return i


def _columns(run, result, op_rows, tr_rows, t0, t1, detail, sites) -> Timeline:
    """Rows -> columns, names/apis/sites interned. Column by column (``zip(*rows)`` and list
    comprehensions): ~3x faster than appending row by row on the 200k rows of a big run."""
    lanes = [HOST] + [d for d in result.summary.devices if d != HOST]
    index = {name: i for i, name in enumerate(lanes)}
    site_list, site_ix = [("", 0, "")], {0: 0}
    for sid in sorted({r[7] for r in op_rows} | {r[10] for r in tr_rows}):
        if sid not in site_ix:
            s = sites.get(sid)
            site_list.append((s.file, s.line, s.function) if s else ("?", 0, "?"))
            site_ix[sid] = len(site_list) - 1
    multi = any("," in r[6] or not r[6] for r in op_rows)
    if multi:  # a sharded op is a bar on each of its devices
        op_rows = [(*r[:6], dev, *r[7:]) for r in op_rows for dev in (r[6].split(",") if r[6] else [HOST])]
    cols = list(zip(*op_rows)) or [()] * 10
    seq, ts, dur, thread, kind, name, devices, sid, error, placed = cols
    names_ix, names = _intern(name)
    kinds_ix, kinds = _intern(kind)
    placed_ix, placed_t = _intern(placed)
    err_ix, errors = _intern([e[:300] for e in error])
    lane_of = {d: _lane_of(lanes, index, d) for d in set(devices)}
    ops = {"seq": list(seq), "lane": [lane_of[d] for d in devices], "ts": [t - t0 for t in ts],
           "dur": [max(d, 0) for d in dur], "name": names_ix, "kind": kinds_ix,
           "site": [site_ix[x] for x in sid], "err": err_ix, "placed": placed_ix, "thread": list(thread)}
    cols = list(zip(*tr_rows)) or [()] * 11
    seq, ts, thread, kind, src, dst, nbytes, implicit, blocking, api, sid = cols
    api_ix, apis = _intern(api)
    lane_of = {d: _lane_of(lanes, index, d) for d in set(src) | set(dst)}
    kind_ix = {k: i for i, k in enumerate(TRANSFER_KINDS)}
    trs = {"seq": list(seq), "ts": [t - t0 for t in ts], "src": [lane_of[x] for x in src],
           "dst": [lane_of[x] for x in dst], "kind": [kind_ix.get(k, len(TRANSFER_KINDS)) for k in kind],
           "bytes": list(nbytes), "flags": [(1 if i else 0) | (2 if b else 0) for i, b in zip(implicit, blocking)],
           "site": [site_ix[x] for x in sid], "api": api_ix, "thread": list(thread)}
    detail.ops_shown = len(set(ops["seq"])) if multi else len(ops["seq"])
    detail.transfers_shown = len(trs["seq"])
    return Timeline(lanes, t0, t1, ops, trs, names, apis, site_list, detail,
                    op_kinds=kinds, op_placed=placed_t, op_errors=errors)


def _intern(values) -> tuple[list[int], list[str]]:
    """values -> (index of each in the table, the table of distinct values, first seen first)."""
    table: dict = {}
    out = [table.setdefault(v, len(table)) for v in values]
    return out, list(table)


def _buckets(conn, tl: Timeline, t0: int, t1: int) -> dict:
    width = max(1, -(-(t1 - t0) // BUCKETS))
    index = {name: i for i, name in enumerate(tl.lanes)}
    ops: dict[int, list] = {}
    for devices, b, n, ns in q.op_buckets(conn, t0, width, BUCKETS):
        for dev in (devices.split(",") if devices else [HOST]):
            ops.setdefault(_lane_of(tl.lanes, index, dev), []).append([b, n, ns or 0])
    routes = {}
    kind_ix = {k: i for i, k in enumerate(TRANSFER_KINDS)}
    for src, dst, kind, b, n, nbytes in q.transfer_buckets(conn, t0, width, BUCKETS):
        key = (_lane_of(tl.lanes, index, src), _lane_of(tl.lanes, index, dst), kind_ix.get(kind, 3))
        routes.setdefault(key, []).append([b, n, nbytes or 0])
    return {"width": width, "n": BUCKETS, "ops": {str(k): sorted(v) for k, v in sorted(ops.items())},
            "routes": [[s, d, k, sorted(v)] for (s, d, k), v in sorted(routes.items())]}


def _steps(conn, result: AuditResult, t0: int, t1: int) -> dict:
    info = result.steps
    if info is None or not info.steps:
        return {"method": info.method if info else "none", "detail": info.detail if info else "",
                "warmup": 0, "start": [], "end": [], "labels": []}
    bounds = {s.start_seq for s in info.steps} | {s.end_seq for s in info.steps}
    times = q.seq_times(conn, bounds)

    def at(seq):
        ts = times.get(seq)
        if ts is None:
            ts = times[seq] = q.last_time_before(conn, seq) or t1
        return ts - t0

    starts = [at(s.start_seq) for s in info.steps]
    ends = [starts[i + 1] if i + 1 < len(starts) and s.end_seq == info.steps[i + 1].start_seq
            else at(s.end_seq) for i, s in enumerate(info.steps)]
    labels = [s.label for s in info.steps[:2000]]  # the first ones: a label is for hovering
    return {"method": info.method, "detail": info.detail, "warmup": info.warmup,
            "start": starts, "end": ends, "labels": labels}


def _compiles(conn, t0: int) -> dict:
    from jaxplace_cli.model.untrusted import parse_value

    out = {"ts": [], "name": [], "secs": [], "total": q.marker_count(conn, "compile")}
    for _seq, ts, value in q.marker_rows(conn, "compile", COMPILES_CAP):
        try:
            v = parse_value(value)
            name, secs = str(v.get("fun", "?")), float(v.get("secs", 0) or 0)
        except (ValueError, AttributeError, TypeError):
            name, secs = "?", 0.0
        if not math.isfinite(secs):  # a damaged marker; JSON (the page's data) has no NaN
            secs = 0.0
        out["ts"].append(ts - t0)
        out["name"].append(name[:200])
        out["secs"].append(round(secs, 6))
    return out


def _moment_groups(conn, result: AuditResult, sites: dict) -> dict[str, list[int]]:
    """``finding:i`` / ``site:i`` -> the seqs of its events (all of them, in order)."""
    by_loc: dict[tuple[str, int], set[int]] = {}
    for s in sites.values():
        by_loc.setdefault((s.file, s.line), set()).add(s.id)
    groups = {}
    min_bytes = result.summary.min_bytes
    for i, f in enumerate(result.findings):
        locs = [(f.file, f.line)] + [(r.get("file"), r.get("line")) for r in f.related if isinstance(r, dict)]
        ids = set().union(*(by_loc.get(loc, set()) for loc in locs if loc[0]))
        if not ids:
            groups[f"finding:{i}"] = []
        elif f.rule in TRANSFER_RULES:  # a finding about small transfers (a ping-pong of
            # 64-byte arrays, float(loss) reads) links to them: the views count them (issue 26)
            groups[f"finding:{i}"] = (q.transfer_seqs_at_sites(conn, ids, min_bytes)
                                      or q.transfer_seqs_at_sites(conn, ids, 0))
        else:
            groups[f"finding:{i}"] = q.op_seqs_at_sites(conn, ids)
    listed = [(f"site:{i}", t) for i, t in enumerate(result.summary.sites)]
    listed += [(f"site:s{i}", t) for i, t in enumerate(result.summary.small_sites)]  # all small
    for key, t in listed:
        ids = {s.id for s in sites.values() if (s.file, s.line, s.function) == (t.file, t.line, t.function)}
        # every transfer the site's row counts, its small ones too (``TransferSite.all_count``)
        groups[key] = q.transfer_seqs_at_sites(conn, ids, 0, t.kind, t.api, t.implicit,
                                                       t.blocking) if ids else []
    return groups


def _moments(tl: Timeline, groups: dict[str, list[int]]) -> dict:
    op_ix: dict[int, list[int]] = {}
    for i, seq in enumerate(tl.ops["seq"]):
        op_ix.setdefault(seq, []).append(i)
    tr_ix = {seq: i for i, seq in enumerate(tl.transfers["seq"])}
    out = {}
    for key, seqs in groups.items():
        ops = [i for s in seqs for i in op_ix.get(s, ())]
        trs = [tr_ix[s] for s in seqs if s in tr_ix]
        out[key] = {"ops": ops, "transfers": trs, "total": len(seqs)}
    return out


def source_lines(locations) -> dict[tuple[str, int], str]:
    """(file, line) -> that line's text, read now, for the locations whose file is a regular
    ``.py`` file of at most ``SOURCE_MAX_BYTES``. Site paths come from the run (untrusted):
    a run naming ``~/.ssh/id_rsa:1`` must not copy that line into a report someone shares."""
    out, cache = {}, {}
    for file, line in locations:
        if not file or not isinstance(line, int) or line < 1 or not _is_python(file):
            continue
        if file not in cache:
            cache[file] = _read_lines(file)
        lines = cache[file]
        if lines is not None and line <= len(lines):
            out[(file, line)] = lines[line - 1].rstrip()[:400]
    return out


def _is_python(file: str) -> bool:
    """A ``.py``/``.pyw`` name that is still one once symlinks are resolved (a run may ship
    ``x.py -> ~/.ssh/id_rsa`` and name it by a relative path)."""
    try:
        return all(p.lower().endswith((".py", ".pyw")) for p in (file, os.path.realpath(file)))
    except (OSError, ValueError):
        return False


def _read_lines(file: str) -> list[str] | None:
    try:
        if not os.path.isfile(file) or os.path.getsize(file) > SOURCE_MAX_BYTES:
            return None
        with open(file, encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()
    except OSError:
        return None
