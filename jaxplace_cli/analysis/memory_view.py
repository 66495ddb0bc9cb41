"""Device memory on the timeline's clock (issue 28 item 4): what the report's memory chart
draws under the timeline, and who held the bytes at its moments.

``analysis/memory.py`` counts live bytes by event order (seq); the page draws them against
time, aligned with the timeline above it. Per device: at most ``MAX_POINTS`` points (each
seq bucket drawn at its largest value, so no peak is smoothed away), each with its time, and
the top lines holding the bytes at up to ``SNAPSHOTS`` of those points (the peak always
among them): what a click on the chart shows. Both are bounded, whatever the run's size.

Memory events carry a seq, not a time: a seq that is an op, transfer or marker takes that
event's time; any other is placed between the known seqs around it (linear in seq).
"""
from __future__ import annotations

import numpy as np

from jaxplace_cli.store import timeline as q

MAX_POINTS = 2000
SNAPSHOTS = 200
TOP = 5  # lines listed per snapshot


def buckets(series, lo: int, hi: int, limit: int = MAX_POINTS) -> list[tuple[int, int]]:
    """At most ``limit`` (seq, bytes), the largest value of each seq bucket; the end state exact."""
    if len(series) <= limit:
        return list(series)
    width = max(1, (hi - lo + 1) // limit + 1)
    seq, nbytes = series.seq, series.bytes  # analysis.memory.Series: no tuple per point
    k = (seq - lo) // width
    o = np.lexsort((np.arange(k.size), -nbytes, k))  # per bucket: the first of its largest values
    head = o[np.concatenate([[True], k[o][1:] != k[o][:-1]])]
    out = list(zip(seq[head].tolist(), nbytes[head].tolist()))
    out[int(np.searchsorted(k[head], k[-1]))] = series[-1]  # the end state exact
    return out


def _snapshots(report, dm, seqs: list[int]) -> dict[int, list]:
    """seq -> the top lines holding ``dm.device``'s bytes after every event up to ``seq``:
    [[file, line, bytes, arrays]] (a line counts an array per event of delta >= 0 and uncounts
    one per negative event; lines that tie on bytes in the order their first event came).
    Bytes and arrays per line are added up chunk by chunk between the wanted seqs: one pass
    over the device's events, in numpy (a run's lines are few; its buffers are not)."""
    want = sorted(set(seqs))
    ev = report.events.get(dm.device)
    if ev is None or not ev.seq.size:
        return {seq: [] for seq in want}
    _u, first, inv = np.unique(report.lives.site[ev.life], return_index=True, return_inverse=True)
    order = np.argsort(first)  # lines by their first event
    code = np.empty_like(order)
    code[order] = np.arange(order.size)
    code = code[inv.reshape(-1)]
    line_sid, line_first = _u[order].tolist(), first[order]
    nbytes = np.zeros(order.size, dtype=np.int64)
    arrays = np.zeros(order.size, dtype=np.int64)
    sign = np.where(ev.delta >= 0, 1, -1)
    out, done = {}, 0
    for seq, cut in zip(want, np.searchsorted(ev.seq, want, "right").tolist()):
        if cut > done:
            np.add.at(nbytes, code[done:cut], ev.delta[done:cut])
            np.add.at(arrays, code[done:cut], sign[done:cut])
            done = cut
        held = np.flatnonzero((line_first < cut) & (arrays > 0))
        rows = []
        for c in held[np.lexsort((held, -nbytes[held]))][:TOP].tolist():
            s = report.sites.get(line_sid[c])
            rows.append([s.file if s else "?", s.line if s else 0, int(nbytes[c]), int(arrays[c])])
        out[seq] = rows
    return out


def _times(conn, seqs: set[int], known: dict[int, int], t0: int) -> dict[int, int]:
    """seq -> ns since ``t0``: exact for an event's seq, else between its known neighbours."""
    exact = {s: t - t0 for s, t in q.seq_times(conn, seqs).items()}
    pairs = sorted({**known, **exact}.items())
    if not pairs:
        return dict.fromkeys(seqs, 0)
    xs = np.array([p[0] for p in pairs], dtype=np.float64)
    ys = np.maximum.accumulate(np.array([p[1] for p in pairs], dtype=np.float64))
    rest = sorted(seqs - exact.keys())
    guess = np.interp(np.array(rest, dtype=np.float64), xs, ys) if rest else []
    return {**exact, **{s: int(g) for s, g in zip(rest, guess)}}


def memory_view(conn, report, known: dict[int, int], t0: int) -> list[dict]:
    """Per device: ``{"device", "t", "bytes", "peak_t", "snap_t", "snaps"}`` (``t``/``bytes``:
    the points; ``snaps[i]``: the holders at ``snap_t[i]``). ``known``: seq -> ns of events the
    timeline already holds. Empty for a run without memory events (or a job's merged audit)."""
    if report is None or not report.events:
        return []
    spans = [sp for d in report.devices if (sp := d.series.span()) is not None]
    if not spans:
        return []
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    plan = []
    for dm in report.devices:
        pts = buckets(dm.series, lo, hi)
        step = max(1, len(pts) // SNAPSHOTS)
        snap = sorted({s for s, _ in pts[::step]} | {dm.peak_seq})
        plan.append((dm, pts, snap))
    times = _times(conn, {s for _, pts, snap in plan for s in [*snap, *(p[0] for p in pts)]}, known, t0)
    out = []
    for dm, pts, snap in plan:
        held = _snapshots(report, dm, snap)
        out.append({"device": dm.device, "t": [times[s] for s, _ in pts], "bytes": [b for _, b in pts],
                    "peak_t": times.get(dm.peak_seq, 0), "peak_bytes": dm.peak_bytes,
                    "snap_t": [times[s] for s in snap], "snaps": [held[s] for s in snap]})
    return out
