"""``suggest --memory-limit``: the device memory a placement will hold, and placements that fit.

**The prediction** replays the run's allocation and free rows (analysis/memory_columns.py ``lives``)
with each buffer on the device its producing node is assigned to; an upload's source node
shares its reader's colour class, so it follows its consumer as ``predict`` routes its bytes;
a sharded, pinned or unmoved buffer stays where it was recorded. The peak of a device is the
maximum over seqs of its live bytes after all the events of one seq, as the audit counts it:
on the recorded placement it is the audit's own peak (checked on the sample scripts), and
``--verify`` compares it with the re-run's audit. Like the audit it counts jax.Arrays only:
the transient copy of an argument that JAX or the placer makes for an op on another device is
no jax.Array Python holds, so neither side counts it (docs/memory.md, "Not counted"). A copy
that a recorded run did hold as an op's argument (``RunGraph.copies``) is left out of the
replay: it belongs to the recorded placement (none did in the runs measured).

**The constraint: reject and repair, not rows in the solvers.** A peak is a maximum over time
of live bytes: an exact model is one knapsack row per moment and device. Min cut and the
expansion moves cannot take side constraints at all, and the multilevel search and the
integer program cap one size per node (``--mem-cap``), which is the sum of everything a node
ever makes, not what is live at once. So every solver's answer is checked by the replay, and
an answer over the limit is repaired by moving whole site/op groups (what a policy file can
say, groups.py) with their colour classes: each step takes the move that removes the most
excess bytes per byte of transfer it adds, until every device fits. The solver's lower bound
stays a bound (a limit only raises the optimum), but the result is no longer claimed optimal.
Exact necessary conditions refuse a limit no placement can meet, with the moment that proves
it (``refuse_impossible``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jaxplace_cli.model.sizes import human_bytes, parse_size
from jaxplace_cli.suggest.model import Partition, cost, feasible

UNLIMITED = np.iinfo(np.int64).max
MAX_MOVES = 200  # repair steps: each moves one group; a request needing more is refused


class NoPlacementFits(ValueError):
    """No placement within the limit: the CLI's one line, exit 2 (a ValueError, as the solvers
    say a request cannot be met)."""


def parse_limits(text: str, devices) -> np.ndarray:
    """``"4GiB"`` (every device) or ``"cpu:0=4GiB,cpu:1=2GiB"`` (devices not named: no limit)
    -> bytes per device of ``devices``. ValueError for a bad size or a device not in the run."""
    devices = list(devices)
    if "=" not in text:
        try:
            return np.full(len(devices), parse_size(text), dtype=np.int64)
        except ValueError as exc:
            raise ValueError(f"--memory-limit: {exc}") from None
    out = np.full(len(devices), UNLIMITED, dtype=np.int64)
    for part in text.split(","):
        name, eq, size = part.partition("=")
        name = name.strip()
        if not eq or not name:
            raise ValueError(f"--memory-limit: {part.strip()!r} is not DEVICE=SIZE (write e.g. cpu:0=4GiB,cpu:1=2GiB)")
        if name not in devices:
            raise ValueError(f"--memory-limit: device {name} is not in this run (devices: {', '.join(devices)})")
        try:
            out[devices.index(name)] = parse_size(size)
        except ValueError as exc:
            raise ValueError(f"--memory-limit: {name}: {exc}") from None
    return out


@dataclass
class MemoryModel:
    """The run's buffers as arrays: movable ones (one device, made by a graph node) follow
    their node; fixed ones stay. ``m_end``/``f_end``: the seq of the free (huge: live at the end)."""

    devices: tuple
    recorded: np.ndarray  # node -> recorded device index
    node_seq: np.ndarray  # node -> the seq of its call
    m_node: np.ndarray
    m_dev: np.ndarray
    m_start: np.ndarray
    m_end: np.ndarray
    m_bytes: np.ndarray
    f_dev: np.ndarray
    f_start: np.ndarray
    f_end: np.ndarray
    f_bytes: np.ndarray

    def devices_of(self, a: np.ndarray) -> np.ndarray:
        nd = self.m_node
        return np.where(a[nd] != self.recorded[nd], a[nd], self.m_dev)

    def peaks(self, assign, movable: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(peak bytes, seq of the peak) per device under ``assign``; ``movable=False``: the
        fixed buffers alone."""
        a = np.asarray(assign, dtype=np.int64)
        k = len(self.devices)
        parts = [(self.f_dev, self.f_start, self.f_end, self.f_bytes)]
        if movable:
            parts.append((self.devices_of(a), self.m_start, self.m_end, self.m_bytes))
        dev = np.concatenate([np.concatenate([p[0], p[0]]) for p in parts])
        time = np.concatenate([np.concatenate([p[1], p[2]]) for p in parts])
        delta = np.concatenate([np.concatenate([p[3], -p[3]]) for p in parts])
        peak = np.zeros(k, dtype=np.int64)
        at = np.zeros(k, dtype=np.int64)
        for d in range(k):
            on = dev == d
            if not on.any():
                continue
            times, inv = np.unique(time[on], return_inverse=True)
            live = np.cumsum(np.bincount(inv, weights=delta[on]).astype(np.int64))
            i = int(np.argmax(live))
            peak[d], at[d] = max(int(live[i]), 0), int(times[i])
        return peak, at


def memory_model(run, rg) -> MemoryModel | None:
    """The model of ``run`` placed as ``rg`` (a ``RunGraph``), or None for a run whose memory is
    not tracked (``analysis.memory.memory_tracked``)."""
    from jaxplace_cli.analysis.memory import memory_tracked
    from jaxplace_cli.analysis.memory_columns import lives

    if not memory_tracked(run):
        return None
    g = rg.graph
    index = {d: i for i, d in enumerate(g.devices)}
    never = np.iinfo(np.int64).max // 4
    lv = lives(run.store)
    copies = np.fromiter(rg.copies, np.int64, len(rg.copies))
    skip = np.isin(lv.buf, copies) | np.isin(lv.root, copies)  # the recorded placement's copies
    stop = np.where(lv.ended, lv.end, never)
    node = np.array([rg.producer.get(r, -1) for r in lv.root.tolist()], dtype=np.int64)
    count = np.bincount(lv.part_life, minlength=len(lv))
    first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)  # each entry's first part
    dev = np.array([index.get(d, -1) for d in lv.devices], dtype=np.int64)[lv.part_dev]
    mov = np.flatnonzero(~skip & (node >= 0) & (count == 1) & (dev[first] >= 0))
    m = np.stack([node[mov], dev[first[mov]], lv.seq[mov], stop[mov], lv.part_bytes[first[mov]]], axis=1)
    fixed = np.ones(len(lv), dtype=bool)
    fixed[mov] = False
    fixed &= ~skip
    p = np.flatnonzero(fixed[lv.part_life] & (dev >= 0))
    pl = lv.part_life[p]
    f = np.stack([dev[p], lv.seq[pl], stop[pl], lv.part_bytes[p]], axis=1)
    seqs = np.array([nd.seq for nd in rg.nodes], dtype=np.int64)
    return MemoryModel(g.devices, np.asarray(rg.recorded, dtype=np.int64), seqs,
                       m[:, 0], m[:, 1], m[:, 2], m[:, 3], m[:, 4], f[:, 0], f[:, 1], f[:, 2], f[:, 3])


def excess(peak: np.ndarray, limits: np.ndarray) -> int:
    return int(np.maximum(peak - limits, 0).sum())


def refuse_impossible(model: MemoryModel, rg, limits: np.ndarray) -> None:
    """NoPlacementFits when one of these necessary conditions fails, naming where:
    arrays no policy moves fit where they were recorded; one op's results (one device) fit
    the largest limit it may run on; at every moment the live bytes fit all the limits
    together, and the arrays larger than half the largest limit (no two share a device) are
    no more than the devices."""
    devices = model.devices
    peak, at = model.peaks(np.asarray(rg.recorded), movable=False)
    for d in np.flatnonzero(peak > limits).tolist():
        raise NoPlacementFits(
            f"no placement fits --memory-limit: arrays no policy can move (explicit device_put targets, "
            f"sharded results) already hold {human_bytes(int(peak[d]))} on {devices[d]} at {_where(rg, int(at[d]))}, "
            f"over its limit of {human_bytes(int(limits[d]))}")
    g = rg.graph
    made = np.zeros(g.n, dtype=np.int64)
    now = model.m_start == model.node_seq[model.m_node]
    np.add.at(made, model.m_node[now], model.m_bytes[now])
    room = np.where(g.allowed, limits[None, :], -1).max(axis=1)
    bad = np.flatnonzero(made > room)
    if bad.size:
        v = int(bad[0])
        raise NoPlacementFits(
            f"no placement fits --memory-limit: {_where(rg, rg.nodes[v].seq)} makes {human_bytes(int(made[v]))} "
            f"at once on one device, more than the limit of any device it may run on ({human_bytes(int(room[v]))})")
    _refuse_by_counting(model, rg, limits)


def _refuse_by_counting(model: MemoryModel, rg, limits: np.ndarray) -> None:
    if (limits >= UNLIMITED).any():
        return  # a device without a limit holds anything
    start = np.concatenate([model.f_start, model.m_start])
    end = np.concatenate([model.f_end, model.m_end])
    size = np.concatenate([model.f_bytes, model.m_bytes])
    if not size.size:
        return
    big = (2 * size > int(limits.max())).astype(np.int64)
    times, inv = np.unique(np.concatenate([start, end]), return_inverse=True)
    live = np.cumsum(np.bincount(inv, weights=np.concatenate([size, -size]).astype(np.float64)))
    count = np.cumsum(np.bincount(inv, weights=np.concatenate([big, -big]).astype(np.float64)))
    total = int(limits.sum())
    for i in range(times.size):
        if live[i] > total:
            have, room = _two_sizes(int(live[i]), total)
            raise NoPlacementFits(
                f"no placement fits --memory-limit: {have} of arrays are live at once at "
                f"{_where(rg, int(times[i]))}, more than all the limits together ({room})")
        if count[i] > len(limits):
            raise NoPlacementFits(
                f"no placement fits --memory-limit: at {_where(rg, int(times[i]))} {int(count[i])} arrays larger than "
                f"half of {human_bytes(int(limits.max()))} are live at once, and each needs a device of its own "
                f"({len(limits)} devices)")


def _two_sizes(a: int, b: int) -> tuple[str, str]:
    """Two sizes that read differently: exact bytes where the rounded forms are equal."""
    x, y = human_bytes(a), human_bytes(b)
    return (f"{x} ({a} B)", f"{y} ({b} B)") if x == y else (x, y)


def _where(rg, seq: int) -> str:
    """``file:line (op)`` of the last op at or before ``seq``, else ``seq N``."""
    best = None
    for nd in rg.nodes:
        if nd.seq <= seq and nd.kind != "source" and (best is None or nd.seq > best.seq):
            best = nd
    return f"{best.file}:{best.line} ({best.name})" if best is not None else f"seq {seq}"


def units(g, group: np.ndarray) -> list[np.ndarray]:
    """What a repair moves at once: a site/op group with every node of its colour classes."""
    parent = np.arange(g.n)

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for labels in (group, g.color):
        first: dict = {}
        for v, c in enumerate(labels.tolist()):
            if c >= 0:
                r, s = find(first.setdefault(c, v)), find(v)
                if r != s:
                    parent[s] = r
    roots = np.array([find(v) for v in range(g.n)], dtype=np.int64)
    out = []
    for r in np.unique(roots[group >= 0]).tolist():
        out.append(np.flatnonzero(roots == r))
    return out


def repair(model: MemoryModel, p: Partition, g, group: np.ndarray, assign: np.ndarray,
           limits: np.ndarray) -> tuple[np.ndarray, int]:
    """``assign`` moved group by group until every device's predicted peak fits (module
    docstring): (the placement, how many groups it places differently from ``assign``).
    NoPlacementFits when no move helps."""
    a = np.asarray(assign, dtype=np.int64).copy()
    over = excess(model.peaks(a)[0], limits)
    base = cost(p, a)
    cands = units(g, group)
    moves = 0
    while over > 0:
        if moves >= MAX_MOVES:
            raise NoPlacementFits(f"no placement fits --memory-limit within {MAX_MOVES} group moves")
        best = None
        for i, nodes in enumerate(cands):
            for d in range(p.k):
                if (a[nodes] == d).all() or not g.allowed[nodes, d].all():
                    continue
                b = a.copy()
                b[nodes] = d
                if not feasible(p, b):
                    continue
                left = excess(model.peaks(b)[0], limits)
                if left >= over:
                    continue
                added = cost(p, b) - base
                key = (added / (over - left), left, i, d)
                if best is None or key < best[0]:
                    best = (key, b, left)
        if best is None:
            peak = model.peaks(a)[0]
            worst = int(np.argmax(peak - limits))
            raise NoPlacementFits(
                f"no placement found within --memory-limit: the best one holds {human_bytes(int(peak[worst]))} on "
                f"{model.devices[worst]} (limit {human_bytes(int(limits[worst]))}) and no move of one site/op group "
                "lowers it")
        _, a, over = best
        base = cost(p, a)
        moves += 1
    a, moves = _improve(model, p, g, cands, a, limits, moves)
    start = np.asarray(assign, dtype=np.int64)
    return a, sum(1 for nodes in cands if (a[nodes] != start[nodes]).any())


def _improve(model: MemoryModel, p: Partition, g, cands: list, a: np.ndarray, limits: np.ndarray,
             moves: int) -> tuple[np.ndarray, int]:
    """After the repair fits: take the group move that lowers the transfer cost most and still
    fits, until none does. The repair moves one group at a time, so two groups that only fit
    together elsewhere (a producer and its reader) can be split by it at a cost; this puts
    them back together."""
    base = cost(p, a)
    while moves and moves < MAX_MOVES and base > 0:
        best = None
        for i, nodes in enumerate(cands):
            for d in range(p.k):
                if (a[nodes] == d).all() or not g.allowed[nodes, d].all():
                    continue
                b = a.copy()
                b[nodes] = d
                c = cost(p, b)
                if c < base and (best is None or (c, i, d) < best[0]) and feasible(p, b) \
                        and excess(model.peaks(b)[0], limits) == 0:
                    best = ((c, i, d), b)
        if best is None:
            break
        a, base = best[1], best[0][0]
        moves += 1
    return a, moves
