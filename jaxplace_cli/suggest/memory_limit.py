"""``suggest --memory-limit``: the device memory a placement will hold, and placements that fit.

**The prediction** replays the run's allocation and free rows (analysis/memory.py ``lives``)
with each buffer on the device its producing node is assigned to (an upload's source node
shares its reader's colour class, so it follows its consumer as ``predict`` routes its bytes;
a sharded, pinned or unmoved buffer stays where it was recorded). The recorded run's placer
copies are left out and replaced by the copies the placement makes: every use of a value on
another device than its producer's is a copy of its bytes on the reader's device, live while
that op's results are counted (the placer's argument copy dies when the call returns). The
peak of a device is the maximum over seqs of its live bytes, evaluated after all the events
of one seq, as the audit does; on the recorded placement it is the audit's own peak.

**The constraint: reject and repair, not rows in the solvers.** A peak is a maximum over time
of live bytes, and the copies a placement makes depend on pairs of nodes, so an exact model is
one knapsack row per moment and device plus a copy variable per directed edge and device.
Min cut and the expansion moves cannot take side constraints at all, and the multilevel search
balances a single size per node; so every solver's answer is checked by the replay, and an
answer over the limit is repaired by moving whole site/op groups (what a policy file can say,
groups.py) with their colour classes: each step takes the move that removes the most excess
bytes per byte of transfer it adds, until every device fits. The solver's lower bound stays a
bound (a limit only raises the optimum), but the result is no longer claimed optimal. Two exact
necessary conditions refuse a limit no placement can meet, with the line that proves it: an
op's results and the inputs live at its call share one device, and arrays no policy moves stay
where they were recorded.
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
        return np.full(len(devices), parse_size(text), dtype=np.int64)
    out = np.full(len(devices), UNLIMITED, dtype=np.int64)
    for part in text.split(","):
        name, eq, size = part.partition("=")
        name = name.strip()
        if not eq or not name:
            raise ValueError(f"{part.strip()!r} is not DEVICE=SIZE (write e.g. cpu:0=4GiB,cpu:1=2GiB)")
        if name not in devices:
            raise ValueError(f"device {name} is not in this run (devices: {', '.join(devices)})")
        out[devices.index(name)] = parse_size(size)
    return out


@dataclass
class MemoryModel:
    """The run's buffers as arrays: movable ones (one device, made by a graph node) follow
    their node; fixed ones stay. Times are ``2 * seq`` (a copy dies at ``2 * seq + 1``)."""

    devices: tuple
    recorded: np.ndarray  # node -> recorded device index
    node_seq: np.ndarray  # node -> the seq of its call
    m_node: np.ndarray
    m_dev: np.ndarray
    m_start: np.ndarray
    m_end: np.ndarray  # huge: live at the end
    m_bytes: np.ndarray
    f_dev: np.ndarray
    f_start: np.ndarray
    f_end: np.ndarray
    f_bytes: np.ndarray
    src: np.ndarray  # the graph's edges (one per use of a value) and their bytes
    dst: np.ndarray
    nbytes: np.ndarray

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
            cut = np.flatnonzero((a[self.src] != a[self.dst]) & (self.nbytes > 0))
            t = 2 * self.node_seq[self.dst[cut]]
            parts.append((a[self.dst[cut]], t, t + 1, self.nbytes[cut]))
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
            peak[d], at[d] = max(int(live[i]), 0), int(times[i]) // 2
        return peak, at


def memory_model(run, rg) -> MemoryModel | None:
    """The model of ``run`` placed as ``rg`` (a ``RunGraph``), or None for a run recorded
    before memory tracking."""
    from jaxplace_cli.analysis.memory import lives
    from jaxplace_cli.store.memory import has_memory

    if not has_memory(run.store):
        return None
    g = rg.graph
    index = {d: i for i, d in enumerate(g.devices)}
    never = np.iinfo(np.int64).max // 4
    mov, fix = [], []
    for r, a, end, parts in lives(run.store):
        if a.buf in rg.copies or r in rg.copies:
            continue  # the recorded placement's copies: the model makes its own
        stop = never if end is None else 2 * end
        node = rg.producer.get(r, -1)
        if node >= 0 and len(parts) == 1 and parts[0][0] in index:
            mov.append((node, index[parts[0][0]], 2 * a.seq, stop, parts[0][1]))
            continue
        for dev, nbytes in parts:
            if dev in index:
                fix.append((index[dev], 2 * a.seq, stop, nbytes))
    m = np.array(mov, dtype=np.int64).reshape(-1, 5)
    f = np.array(fix, dtype=np.int64).reshape(-1, 4)
    seqs = np.array([nd.seq for nd in rg.nodes], dtype=np.int64)
    return MemoryModel(g.devices, np.asarray(rg.recorded, dtype=np.int64), seqs,
                       m[:, 0], m[:, 1], m[:, 2], m[:, 3], m[:, 4], f[:, 0], f[:, 1], f[:, 2], f[:, 3],
                       g.src, g.dst, g.nbytes)


def excess(peak: np.ndarray, limits: np.ndarray) -> int:
    return int(np.maximum(peak - limits, 0).sum())


def refuse_impossible(model: MemoryModel, rg, limits: np.ndarray) -> None:
    """NoPlacementFits when a necessary condition fails (module docstring), naming the line."""
    devices = model.devices
    peak, at = model.peaks(np.asarray(rg.recorded), movable=False)
    for d in np.flatnonzero(peak > limits).tolist():
        raise NoPlacementFits(
            f"no placement fits --memory-limit: arrays no policy can move (explicit device_put targets, "
            f"sharded results) already hold {human_bytes(int(peak[d]))} on {devices[d]} at seq {int(at[d])}, "
            f"over its limit of {human_bytes(int(limits[d]))}")
    g = rg.graph
    n = g.n
    need = np.zeros(n, dtype=np.int64)
    made_now = model.m_start == 2 * model.node_seq[model.m_node] if model.m_node.size else np.zeros(0, bool)
    np.add.at(need, model.m_node[made_now], model.m_bytes[made_now])
    # an input counts when its value is live at the call either way: the original where its
    # producer is, or a copy on the op's device; one use of each value (a copy per use would be more)
    live = _value_live_at(model, g)
    seen = set()
    for e in np.flatnonzero(live).tolist():
        key = (int(g.dst[e]), int(g.value[e]))
        if key not in seen:
            seen.add(key)
            need[g.dst[e]] += int(g.nbytes[e])
    room = np.where(g.allowed, limits[None, :], -1).max(axis=1) if n else need
    bad = np.flatnonzero(need > room)
    if bad.size:
        v = int(bad[np.argmax(need[bad] - room[bad])])
        nd = rg.nodes[v]
        raise NoPlacementFits(
            f"no placement fits --memory-limit: {nd.file}:{nd.line} ({nd.name}) needs {human_bytes(int(need[v]))} "
            f"on one device at once (its inputs and results), more than the limit of any device it may run on "
            f"({human_bytes(int(max(room[v], 0)))})")


def _value_live_at(model: MemoryModel, g) -> np.ndarray:
    """Per edge: the value it carries is live when its reader's results are counted."""
    if not g.m:
        return np.zeros(0, dtype=bool)
    t = 2 * model.node_seq[g.dst]
    # the value's buffer life: the movable rows of its producer that cover the reader's call
    out = np.zeros(g.m, dtype=bool)
    by_node: dict = {}
    for i, v in enumerate(model.m_node.tolist()):
        by_node.setdefault(v, []).append(i)
    for e in range(g.m):
        for i in by_node.get(int(g.src[e]), ()):
            if model.m_bytes[i] == g.nbytes[e] and model.m_start[i] <= t[e] < model.m_end[i]:
                out[e] = True
                break
    return out


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
    docstring): (the placement, moves made). NoPlacementFits when no move helps."""
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
    return a, moves
