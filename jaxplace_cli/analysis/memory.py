"""Device memory over a run (issue 27): live bytes per device, by the line that made them.

Counted from the capture's allocation rows (``buffers``: a jax.Array first seen, its device
and bytes) and free rows (``frees``), per shard for an array over several devices
(``shards``). It is what Python holds: XLA's temporaries inside a compiled program are not
jax.Arrays and are not counted; where the backend has ``memory_stats()`` (GPU/TPU) its own
figures are reported beside (``source: tracked+memory_stats``). The peak of a device is the
first moment (seq) its live bytes reach their maximum, evaluated after every buffer made by
one call (a jit call's results share its seq). A free carries the seq of the event after it
and counts before that event's allocations; a buffer donated to a call is freed at the call's
seq, so before its results (they may reuse its memory).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from jaxplace_cli.analysis import memory_columns as cols
from jaxplace_cli.store import memory as q

TOP_HOLDERS = 10  # holders listed at a device's peak


class Series:
    """A device's ``(seq, live bytes)`` after each change, read as a sequence of pairs but kept as
    two int64 arrays: as a list of tuples (~120 B a point) it was 1.2 GB of a 10M-event run's
    audit (4.8M arrays made and freed: 9.6M points; P8 allows 1 GB for the whole audit)."""

    __slots__ = ("seq", "bytes")
    CHUNK = 1 << 16  # points made into tuples at a time while iterating

    def __init__(self, seq=(), nbytes=()):
        self.seq = np.asarray(seq, dtype=np.int64).reshape(-1)
        self.bytes = np.asarray(nbytes, dtype=np.int64).reshape(-1)

    def __len__(self) -> int:
        return int(self.seq.size)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(zip(self.seq[i].tolist(), self.bytes[i].tolist()))
        return (int(self.seq[i]), int(self.bytes[i]))

    def __iter__(self):
        for a in range(0, len(self), self.CHUNK):
            yield from zip(self.seq[a:a + self.CHUNK].tolist(), self.bytes[a:a + self.CHUNK].tolist())

    def __eq__(self, other) -> bool:
        if isinstance(other, Series):
            return np.array_equal(self.seq, other.seq) and np.array_equal(self.bytes, other.bytes)
        return isinstance(other, (list, tuple)) and list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"Series({len(self)} points)"

    def span(self) -> tuple[int, int] | None:
        """(first seq, last seq), None for no point."""
        return (int(self.seq.min()), int(self.seq.max())) if self.seq.size else None


@dataclass
class Holder:
    """One line's arrays live on a device at its peak."""

    file: str
    line: int
    function: str
    bytes: int
    arrays: int


@dataclass
class DeviceMemory:
    device: str
    peak_bytes: int
    peak_seq: int
    peak_step: int | None
    end_bytes: int
    at_peak: list[Holder] = field(default_factory=list)
    stats: tuple[int, int] | None = None  # memory_stats(): (bytes_in_use, peak_bytes_in_use)
    # the live bytes after each seq where they changed: what charts and the growth rule read
    series: Series = field(default_factory=Series)
    # memory_stats() at each step's end: (step, bytes_in_use, peak_bytes_in_use); GPU/TPU only
    stats_by_step: list[tuple[int, int, int]] = field(default_factory=list)
    process: int | None = None  # the process that owns the device, in a job's merged audit


@dataclass
class Failed:
    file: str
    line: int
    device: str
    bytes: int
    error: str
    process: int | None = None  # as DeviceMemory.process


@dataclass
class MemoryReport:
    source: str  # "tracked" | "tracked+memory_stats"
    devices: list[DeviceMemory]
    failed_allocations: list[Failed]
    # device -> its events as columns (memory_columns.DeviceEvents), and the allocations they
    # index (memory_columns.Lives); None in a job's merged report
    events: dict = field(default_factory=dict, repr=False)
    lives: object = field(default=None, repr=False)
    replicated: list = field(default_factory=list, repr=False)  # (buf, site, devices, bytes, seq, end or None)
    sites: dict = field(default_factory=dict, repr=False)

    def live_at(self, device: str, seq: int) -> int:
        """Live bytes on ``device`` after every event up to and including ``seq``."""
        return self.live_at_each(device, [seq])[0]

    def live_at_each(self, device: str, seqs: list[int]) -> list[int]:
        """``live_at`` of each of ``seqs``, in one search (a 10M-event run's 140k steps: 1.8 s
        one by one)."""
        dm = next((d for d in self.devices if d.device == device), None)
        if dm is None or not len(dm.series):
            return [0] * len(seqs)
        lo, hi = -(1 << 63), (1 << 63) - 1  # a damaged step's seq may lie past int64: before every point, or after
        i = np.searchsorted(dm.series.seq, np.array([min(max(s, lo), hi) for s in seqs], dtype=np.int64), "right") - 1
        return [0 if s < lo or k < 0 else b for s, k, b in zip(seqs, i.tolist(), dm.series.bytes[np.maximum(i, 0)].tolist())]


def memory_tracked(run) -> bool:
    """The run's store tracks its arrays' lives: not a run recorded before memory tracking, nor
    one recorded with ``--record transfers`` (the eager ops' arrays are not tracked there, so a
    peak or a model of the rest would be wrong, not partial). The audit, the budget and suggest
    all ask here."""
    return getattr(getattr(run, "manifest", None), "record", None) != "transfers" and q.has_memory(run.store)


def memory_report(run, steps=None) -> MemoryReport | None:
    """The run's device memory, or None for a run recorded before memory tracking or with
    ``--record transfers`` (the eager ops' arrays are not tracked there: a peak of what jit calls
    made alone would be wrong, not partial)."""
    store = run.store
    if not memory_tracked(run):
        return None
    sites = store.sites()
    lv = cols.lives(store)
    events = {lv.devices[d]: ev for d, ev in cols.device_events(lv).items()}
    stats = q.memory_stats(store)
    by_step = _stats_by_step(store, steps) if stats else {}
    devices = []
    for dev in sorted(events, key=_device_key):
        ev = events[dev]
        peak, peak_seq = cols.peak(ev.series_seq, ev.series_bytes)
        n = int(np.searchsorted(ev.seq, peak_seq, "right"))
        ent, held, entered = cols.live_pop(ev.life, ev.delta, n, len(lv))
        series = Series(ev.series_seq, ev.series_bytes)
        devices.append(DeviceMemory(dev, peak, peak_seq, _step_of(steps, peak_seq) if peak else None,
                                    series[-1][1], _holders(lv.site[ent], held, entered, sites), stats.get(dev),
                                    series, stats_by_step=by_step.get(dev, [])))
    failed = []
    for f in q.failed_allocations(store):
        s = sites.get(f.site)
        failed.append(Failed(s.file if s else "?", s.line if s else 0, f.device, f.bytes, f.error))
    source = "tracked+memory_stats" if stats else "tracked"
    return MemoryReport(source, devices, failed, events, lv, _replicated(lv), sites)


def _replicated(lv) -> list[tuple]:
    """(buf, site, devices, bytes, seq made, seq freed or None) of each allocation held whole on
    more than one device."""
    n = len(lv)
    count = np.bincount(lv.part_life, minlength=n)
    whole = np.bincount(lv.part_life, weights=lv.part_bytes == lv.nbytes[lv.part_life], minlength=n)
    start = np.concatenate([[0], np.cumsum(count)])
    out = []
    for i in np.flatnonzero((count > 1) & (whole == count) & (lv.nbytes > 0)).tolist():
        devs = [lv.devices[d] for d in lv.part_dev[start[i]:start[i + 1]].tolist()]
        out.append((int(lv.root[i]), int(lv.site[i]), devs, int(lv.nbytes[i]), int(lv.seq[i]),
                    int(lv.end[i]) if lv.ended[i] else None))
    return out


def _stats_by_step(store, steps) -> dict[str, list[tuple[int, int, int]]]:
    """device -> [(step, bytes_in_use, peak_bytes_in_use)] of the samples taken inside a step
    (capture/memory.py takes one as each step ends); the end-of-run sample is ``stats``."""
    out: dict = {}
    for seq, sample in q.memory_stats_samples(store):
        step = _step_of(steps, seq)
        if step is None:
            continue
        for dev, (in_use, peak) in sample.items():
            out.setdefault(dev, []).append((step, in_use, peak))
    return out


def _holders(site, held, entered, sites: dict) -> list[Holder]:
    """The top lines holding live buffers: most bytes first, then by line; lines that tie on
    both in the order their first buffer became live."""
    out = []
    for sid, nbytes, n, first in cols.by_site(site, held, entered):
        s = sites.get(sid)
        out.append((Holder(s.file if s else "?", s.line if s else 0, s.function if s else "?", nbytes, n), first))
    out.sort(key=lambda x: (-x[0].bytes, x[0].file, x[0].line, x[0].function, x[1]))
    return [h for h, _ in out[:TOP_HOLDERS]]


def _step_of(steps, seq: int) -> int | None:
    """The number of the step holding event ``seq``, as the rest of the audit numbers steps (the
    script's ``step_num``, else from 1); None outside every step."""
    if steps is None:
        return None
    for st in steps.steps:
        if st.start_seq <= seq < st.end_seq:
            return st.number
    return None


def _device_key(label: str):
    platform, _, num = label.rpartition(":")
    return (platform, int(num)) if num.isdigit() else (label, -1)


def step_ends(report: MemoryReport, steps, least: int = 2) -> dict[str, tuple[float, list[int]]]:
    """device -> (bytes gained per steady-state step, live bytes at each steady step's end):
    the change from the first steady step's end to the last's, over the steps between (at
    least ``least`` steady steps; none without)."""
    out: dict = {}
    steady = [s for s in steps.steps if s.index >= steps.warmup] if steps is not None else []
    if len(steady) < least:
        return out
    for dm in report.devices:
        ends = report.live_at_each(dm.device, [s.end_seq - 1 for s in steady])
        out[dm.device] = ((ends[-1] - ends[0]) / (len(ends) - 1), ends)
    return out


def growth(report: MemoryReport, steps) -> dict[str, tuple[float, list[int]]]:
    """``step_ends`` of the devices whose live bytes grew at every steady-state step (at least
    3 of them): what the memory-growth rule calls a leak."""
    return {dev: v for dev, v in step_ends(report, steps, 3).items()
            if all(b > a for a, b in zip(v[1], v[1][1:]))}


def total_peak(report: MemoryReport) -> tuple[int, int, list[Holder]]:
    """(bytes, seq, holders) of the moment the devices together held the most."""
    evs = list(report.events.values())
    if not evs:
        return 0, 0, []
    lv = report.lives
    if len(evs) == 1:  # one device: its events are in this order already (no 0.3 GB of copies at 10M events)
        seq, delta, life = evs[0].seq, evs[0].delta, evs[0].life
        nbytes, peak_seq = cols.peak(evs[0].series_seq, evs[0].series_bytes)
    else:
        seq, delta, life = (np.concatenate([getattr(e, k) for e in evs]) for k in ("seq", "delta", "life"))
        o = np.lexsort((lv.root[life], delta >= 0, seq))  # stable: a tie keeps its device's order
        seq, delta, life = seq[o], delta[o], life[o]
        nbytes, peak_seq = cols.peak(*cols.series(seq, delta))
    n = int(np.searchsorted(seq, peak_seq, "right"))
    ent, held, entered = cols.live_reset(life, delta, n)
    return nbytes, peak_seq, _holders(lv.site[ent], held, entered, report.sites)


def merge_processes(reports: list[tuple[int, MemoryReport]]) -> MemoryReport | None:
    """A job's memory (issue 27, item 7): each process's devices and failed allocations, marked
    with the process. A device belongs to one process (its seqs are that process's), so nothing
    is added across processes; a device two processes report (a simulated CPU device id that
    both use) stays two entries, one per process."""
    if not reports:
        return None
    devices = [replace(d, process=i) for i, r in reports for d in r.devices]
    failed = [replace(f, process=i) for i, r in reports for f in r.failed_allocations]
    source = "tracked+memory_stats" if any(r.source != "tracked" for _, r in reports) else "tracked"
    return MemoryReport(source, devices, failed)


def as_dict(report: MemoryReport) -> dict:
    """The audit document's ``memory`` object (docs/audit-json-schema.md)."""
    devices = []
    for d in report.devices:
        entry = {"device": d.device, "peak_bytes": d.peak_bytes, "peak_seq": d.peak_seq,
                 "peak_step": d.peak_step, "end_bytes": d.end_bytes,
                 "at_peak": [{"file": h.file, "line": h.line, "function": h.function,
                              "bytes": h.bytes, "arrays": h.arrays} for h in d.at_peak]}
        if d.stats is not None:
            entry["memory_stats"] = {"bytes_in_use": d.stats[0], "peak_bytes_in_use": d.stats[1]}
        if d.stats_by_step:
            entry["stats_by_step"] = [{"step": st, "bytes_in_use": a, "peak_bytes_in_use": b}
                                      for st, a, b in d.stats_by_step]
        if d.process is not None:
            entry["process"] = d.process
        devices.append(entry)
    failed = []
    for f in report.failed_allocations:
        failed.append({"file": f.file, "line": f.line, "device": f.device, "bytes": f.bytes, "error": f.error})
        if f.process is not None:
            failed[-1]["process"] = f.process
    return {"source": report.source, "devices": devices, "failed_allocations": failed}
