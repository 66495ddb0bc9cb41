"""The device-memory analysis as numpy columns (analysis/memory.py reads its results).

A 1M-event run holds ~480k buffers. Kept as one Python object per row (an ``Allocation``
tuple, a ``(device, bytes)`` list, an event tuple, a dict entry per buffer) the memory
report took 6.6 s of a 12 s ``jaxplace report`` under cProfile; as int64 columns it takes
well under a second (``memory_report`` of a 1M-event run, 3 calls in one process, 2 cores at
load ~5: 4.4-4.6 s CPU, 4.6-7.1 s wall per-row; 0.7-1.1 s CPU columnar, 0.6 s of it reading
SQLite). The memory chart's snapshots (memory_view.py) went from 1 s to 0.05 s. Every rule of
the per-row code is kept exactly, and said where it is computed:

* rows in ``(seq, buf)`` order (a buffer of negative bytes, which jaxplace never writes, is a
  ``DataError``: ``suggest`` says the same of it), a ``device_put`` result
  on its argument's device folded into the argument (``_aliases``);
* an allocation's end is the largest first-free seq of its aliases (at least 0), none while
  one alias was never freed;
* its parts: its shard rows (table order), else its multi-device label split evenly (floor
  division), else its one device;
* events of a device sorted by ``(seq, delta >= 0, root)``: a free before the allocations of
  its seq; events that tie on that key belong to one allocation and commute;
* who is live after a prefix of events: ``live_pop`` (a negative delta drops the buffer, the
  audit's holders and the growth rule) and ``live_reset`` (bytes summed, dropped at <= 0, the
  total peak), each with the position the buffer entered the live set, which orders holders
  that tie on bytes and line as the dicts did.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jaxplace_cli.analysis.rules.base import ids
from jaxplace_cli.model.errors import DataError
from jaxplace_cli.store import memory as q

I64 = np.int64
# Parts made by splitting multi-device labels (buffers without shard rows: jaxplace writes shard
# rows for every array over several devices, so only an older or altered store splits labels).
# Three int64 columns a part: 2**24 parts are 400 MB, within P8's 1 GB. A store whose labels
# name thousands of devices on a million rows asked for rows x devices parts (review, stop 56).
MAX_SPLIT_PARTS = 1 << 24


@dataclass
class Lives:
    """Every device allocation of a run, once, entry ``i`` per allocation in the order of its
    first row: ``root`` its first buffer (what events and holders are keyed by), ``buf``/``seq``/
    ``site``/``nbytes`` of that first row (an alias's, for a device_put onto its own device),
    ``end`` the seq its last alias was freed (valid where ``ended``; not ended: one alias
    lived to the end), and its parts (device, bytes) as flat columns grouped by entry."""

    devices: list  # device index -> label
    root: np.ndarray
    buf: np.ndarray
    seq: np.ndarray
    site: np.ndarray
    nbytes: np.ndarray
    end: np.ndarray
    ended: np.ndarray
    part_life: np.ndarray
    part_dev: np.ndarray
    part_bytes: np.ndarray

    def __len__(self) -> int:
        return int(self.root.size)


@dataclass
class DeviceEvents:
    """One device's events, sorted by ``(seq, delta >= 0, root)``, and the live bytes after each
    seq where they changed (``series_seq``/``series_bytes``)."""

    seq: np.ndarray
    delta: np.ndarray
    life: np.ndarray  # the Lives entry of each event
    series_seq: np.ndarray
    series_bytes: np.ndarray


def lives(store) -> Lives:
    """Every device allocation of the run, once (``Lives``): what the audit sweeps and what
    ``suggest --memory-limit`` replays under another placement (suggest/memory_limit.py).

    Each temporary is dropped as soon as it is used: 4.8M buffers' columns are 38 MB each, and
    the 10M-event audit (P8: <= 1 GB) peaked at 1.3 GB here with them all kept to the end."""
    cols, labels = q.buffer_columns(store)
    order = np.lexsort((cols["buf"], cols["seq"]))  # as ORDER BY seq, buf; ties in table order
    if (order[1:] > order[:-1]).all():  # already in that order: no copies
        order = slice(None)
    buf, seq, nbytes, site, dev = (cols.pop(k)[order] for k in ("buf", "seq", "bytes", "site", "device"))
    del order
    if (nbytes < 0).any():
        negative = int((nbytes < 0).sum())
        raise DataError(f"buffers: {negative} rows have a negative size in bytes; the events store was altered")
    root = _roots(buf, _aliases(store, buf, dev, labels))
    life, fi = _entries(root)
    freed, fseq = _first_frees(store, buf)
    ended = np.ones(fi.size, dtype=bool)
    ended[life[~freed]] = False
    end = np.zeros(fi.size, dtype=I64)  # max(0, the aliases' frees), as the per-row code
    np.maximum.at(end, life[freed], fseq[freed])
    del freed, fseq, life
    end[~ended] = 0
    labels = list(labels)
    if fi.size == buf.size:  # every row its own allocation (no alias): fi is every row, in order
        ebuf, eroot, eseq, esite, edev, ebytes = buf, root, seq, site, dev, nbytes
    else:
        ebuf, eroot, eseq, esite, edev, ebytes = (a[fi] for a in (buf, root, seq, site, dev, nbytes))
    del buf, root, seq, site, dev, nbytes
    parts = _parts(store, ebuf, edev, ebytes, labels)
    return Lives(labels, eroot, ebuf, eseq, esite, ebytes, end, ended, *parts)


def _entries(root: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the entry of each row, the first row of each entry): rows of one root are one entry,
    entries numbered in the order of their first row (``np.unique`` with its index and inverse,
    less its copies: 260 MB of the 10M-event audit's peak)."""
    n = root.size
    perm = np.argsort(root, kind="stable")
    s = root[perm]
    head = np.ones(n, dtype=bool)
    np.not_equal(s[1:], s[:-1], out=head[1:])
    del s
    if head.all():
        every = np.arange(n, dtype=I64)
        return every, every
    first = perm[head]  # stable: the first row of each root, roots in sorted order
    by_first = np.argsort(first)
    rank = np.empty_like(by_first)
    rank[by_first] = np.arange(by_first.size)
    life = np.empty(n, dtype=I64)
    life[perm] = rank[np.cumsum(head) - 1]
    return life, first[by_first]


def _first_frees(store, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(freed?, the seq of its first free row) of each buffer of ``buf``."""
    fc = q.free_columns(store)
    o = np.lexsort((fc["seq"], fc["buf"]))
    fb = fc.pop("buf")[o]
    fs = fc.pop("seq")[o]
    del o
    if not fb.size:
        return np.zeros(buf.size, dtype=bool), np.zeros(buf.size, dtype=I64)
    head = np.ones(fb.size, dtype=bool)
    np.not_equal(fb[1:], fb[:-1], out=head[1:])
    if not head.all():
        fb, fs = fb[head], fs[head]
    del head
    pos = np.searchsorted(fb, buf)
    np.minimum(pos, fb.size - 1, out=pos)
    hit = fb[pos] == buf
    fseq = fs[pos]
    fseq[~hit] = 0
    return hit, fseq


def _aliases(store, buf: np.ndarray, dev: np.ndarray, labels: list) -> dict[int, int]:
    """buffer -> the first buffer of its device memory, for results of ``device_put`` onto the
    device their argument is already on (JAX returns a new Array over the same buffer: one
    allocation, live until its last alias is freed)."""
    pairs = [(ids(i), ids(o)) for i, o in q.device_put_pairs(store)]
    if not pairs:
        return {}
    known = {x for a, b in pairs for x in (*a, *b) if -(1 << 63) <= x < (1 << 63)}
    mask = np.isin(buf, np.fromiter(known, I64, len(known)))
    device = dict(zip(buf[mask].tolist(), [labels[c] for c in dev[mask].tolist()]))  # the last row wins
    root: dict[int, int] = {}
    for a, b in pairs:
        if len(a) != len(b):
            continue
        for i, o in zip(a, b):
            if i and o and i != o and device.get(i) is not None and device.get(i) == device.get(o):
                root[o] = root.get(i, i)
    return root


def _roots(buf: np.ndarray, alias: dict) -> np.ndarray:
    """Each row's root buffer: ``buf`` itself (not a copy) where no buffer is an alias."""
    if not alias:
        return buf
    root = buf.copy()
    keys = np.fromiter(alias.keys(), I64, len(alias))
    vals = np.fromiter(alias.values(), I64, len(alias))
    o = np.argsort(keys)
    keys, vals = keys[o], vals[o]
    pos = np.minimum(np.searchsorted(keys, buf), keys.size - 1)
    hit = keys[pos] == buf
    root[hit] = vals[pos[hit]]
    return root


def _parts(store, ebuf, edev, ebytes, labels: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(entry, device, bytes) of each part: its shard rows, else its label split, else itself."""
    index = {v: i for i, v in enumerate(labels)}

    def code(label) -> int:
        if label not in index:
            index[label] = len(labels)
            labels.append(label)
        return index[label]

    sc, slabels = q.shard_columns(store)
    if not sc["buf"].size and not any("," in label for label in labels):  # each entry is its one part
        return np.arange(ebuf.size, dtype=I64), edev, ebytes
    sharded = np.isin(ebuf, sc["buf"])
    so = np.argsort(sc["buf"], kind="stable")
    L = np.flatnonzero(sharded)
    lo = np.searchsorted(sc["buf"][so], ebuf[L], "left")
    cnt = np.searchsorted(sc["buf"][so], ebuf[L], "right") - lo
    rows = so[np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))]
    smap = np.array([code(v) for v in slabels], dtype=I64)
    out = [(np.repeat(L, cnt), smap[sc["device"][rows]], sc["bytes"][rows])]
    rest = np.flatnonzero(~sharded)
    _split_parts_bounded(labels, edev[rest])
    # the entries of each label, labels in code order, entries ascending within one: one sort,
    # not a scan of every entry per label (30k labels x 112k buffers: 1 min 41 s, review)
    for c, L in _groups(edev, rest):
        label = labels[c]
        if "," not in label:
            out.append((L, edev[L], ebytes[L]))
            continue
        devs = [code(d) for d in label.split(",")]
        k = len(devs)
        out.append((np.repeat(L, k), np.tile(np.array(devs, dtype=I64), L.size), np.repeat(ebytes[L] // k, k)))
    life, dev, nbytes = (np.concatenate([p[i] for p in out]).astype(I64) for i in range(3))
    o = np.argsort(life, kind="stable")
    return life[o], dev[o], nbytes[o]


def _split_parts_bounded(labels: list, codes: np.ndarray) -> None:
    """A ``DataError`` before the split, when the multi-device labels of ``codes`` would make
    more than ``MAX_SPLIT_PARTS`` parts (counted per label, no part made)."""
    if not codes.size:
        return
    counts = np.bincount(codes, minlength=len(labels)).tolist()
    total = sum(n * (labels[c].count(",") + 1) for c, n in enumerate(counts) if n and "," in labels[c])
    if total > MAX_SPLIT_PARTS:
        raise DataError(f"buffers: their multi-device labels would split into {total:,} per-device parts, "
                        f"more than {MAX_SPLIT_PARTS:,} (jaxplace writes shard rows for such buffers: "
                        "the events store was altered)")


def _groups(code: np.ndarray, rows: np.ndarray | None = None):
    """(code, its rows ascending) for each code of ``code[rows]`` (``rows`` ascending; None: every
    row, and a slice, not a copy, when one code is all there is), codes in ascending order."""
    sel = code if rows is None else code[rows]
    if not sel.size:
        return
    if sel.min() == sel.max():
        yield int(sel[0]), slice(None) if rows is None else rows
        return
    o = np.argsort(sel, kind="stable")
    if rows is not None:
        o = rows[o]
    c = code[o]
    cuts = (np.flatnonzero(c[1:] != c[:-1]) + 1).tolist()
    for lo, hi in zip([0, *cuts], [*cuts, o.size]):
        yield int(c[lo]), o[lo:hi]


def device_events(lv: Lives) -> dict[int, DeviceEvents]:
    """device index -> its events (an allocation's bytes at its seq, minus them at its end),
    one device at a time: all devices' events at once, sorted, were ~0.55 GB of the 10M-event
    audit's peak (9.6M events)."""
    out = {}
    for d, idx in _groups(lv.part_dev):
        pl, pb = lv.part_life[idx], lv.part_bytes[idx]
        fr = lv.ended[pl]
        life = np.concatenate([pl, pl[fr]])
        seq = np.concatenate([lv.seq[pl], lv.end[pl[fr]]])
        delta = np.concatenate([pb, -pb[fr]])
        del pl, pb, fr, idx
        o = np.lexsort((lv.root[life], delta >= 0, seq))  # stable: a tie keeps the parts' order
        life = life[o]  # one at a time: each copy is 77 MB at 10M events
        seq = seq[o]
        delta = delta[o]
        del o
        out[d] = DeviceEvents(seq, delta, life, *series(seq, delta))
    return out


def series(seq: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seq, live bytes after it) at the last event of each seq: every buffer of one call first."""
    cur = np.cumsum(delta, dtype=I64)
    last = np.flatnonzero(np.concatenate([seq[1:] != seq[:-1], [True]])) if seq.size else seq
    return seq[last], cur[last]


def peak(series_seq: np.ndarray, series_bytes: np.ndarray) -> tuple[int, int]:
    """(bytes, seq) of the first moment the live bytes reach their maximum; (0, 0) when they
    never rise above 0."""
    if not series_bytes.size:
        return 0, 0
    i = int(np.argmax(series_bytes))  # the first of equal maxima
    return (int(series_bytes[i]), int(series_seq[i])) if series_bytes[i] > 0 else (0, 0)


def live_pop(life: np.ndarray, delta: np.ndarray, n: int, count: int):
    """(entries, bytes, position each entered) live after the first ``n`` events, where an
    event of delta >= 0 adds to its buffer and a negative one drops the buffer: its bytes are
    those added after its last drop."""
    life, delta = life[:n], delta[:n]
    pos = np.arange(n, dtype=I64)
    neg = delta < 0
    last = np.full(count, -1, dtype=I64)
    np.maximum.at(last, life[neg], pos[neg])
    after = pos > last[life]
    la = life[after]
    held = np.zeros(count, dtype=I64)
    np.add.at(held, la, delta[after])
    entered = np.full(count, n, dtype=I64)
    np.minimum.at(entered, la, pos[after])
    alive = np.zeros(count, dtype=bool)
    alive[la] = True
    ent = np.flatnonzero(alive)
    return ent, held[ent], entered[ent]


def live_reset(life: np.ndarray, delta: np.ndarray, n: int):
    """(entries, bytes, position each entered) live after the first ``n`` events, where every
    event adds its delta and a buffer at <= 0 bytes is dropped. Per buffer that is
    ``s = max(s + d, 0)``: after its events ``S[-1] - min(0, min S)`` of their running sums
    ``S``, entered after the last event at that minimum."""
    life, delta = life[:n], delta[:n]
    if not n:
        return life, delta, life
    o = np.argsort(life, kind="stable")
    lf, d = life[o], delta[o]
    starts = np.flatnonzero(np.concatenate([[True], lf[1:] != lf[:-1]]))
    ends = np.concatenate([starts[1:], [n]]) - 1
    c = np.cumsum(d, dtype=I64)
    gid = np.repeat(np.arange(starts.size), np.diff(np.concatenate([starts, [n]])))
    s = c - (c[starts] - d[starts])[gid]
    low = np.minimum(np.minimum.reduceat(s, starts), 0)
    final = s[ends] - low
    at_low = np.where(s == low[gid], np.arange(n), -1)
    k = np.maximum.reduceat(at_low, starts)
    keep = final > 0  # a buffer still held is above its minimum at its last event
    entered = o[np.minimum(np.where(k >= 0, k + 1, starts), ends)]
    return lf[starts][keep], final[keep], entered[keep]


def by_site(site: np.ndarray, held: np.ndarray, entered: np.ndarray) -> list[tuple[int, int, int, int]]:
    """[(site, bytes, arrays, first entry position)] of live buffers grouped by their site."""
    if not site.size:
        return []
    u, inv = np.unique(site, return_inverse=True)
    inv = inv.reshape(-1)
    nbytes = np.zeros(u.size, dtype=I64)
    np.add.at(nbytes, inv, held)
    first = np.full(u.size, np.iinfo(I64).max, dtype=I64)
    np.minimum.at(first, inv, entered)
    arrays = np.bincount(inv, minlength=u.size)
    return list(zip(u.tolist(), nbytes.tolist(), arrays.tolist(), first.tolist()))
