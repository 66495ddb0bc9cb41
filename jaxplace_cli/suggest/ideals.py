"""Contiguous placement, the structure: colour classes, the DAG they form, and its ideals.

The model is the one of Tarnawski et al. (NeurIPS 2020, "Efficient Algorithms for Device
Placement of DNN Graph Operators"; msr-fiddle/dnn-partitioning ``throughput-dp``). A
*contiguous* split of a DAG into stages is a chain of ideals (down-closed sets, i.e. sets
that contain every predecessor of their members) ``{} = I0 < I1 < ... < Ik = all``; stage j
is ``Ij \\ Ij-1``. In a training graph only the forward part orders the stages: a backward
node goes wherever the forward nodes of its colour class go.

What is built here, and why each step is exact in that model:
- **classes**: nodes of one ``colorClass`` share a device, so each class is one lattice node;
  uncoloured nodes are classes of their own.
- **orphaned backward classes** (backward nodes whose class has no forward node): the paper
  gives each an artificial forward node, ordered by mirroring the backward edges (backward
  ``u -> v`` becomes forward ``v -> u``). Here the class itself takes that place.
- **cycles**: classes that reach each other in the forward graph are in every ideal together,
  so they are one lattice node (strongly connected components).
- **ideals** are enumerated level by level (each ideal of size s+1 is one of size s plus a
  node all of whose predecessors it holds), deduplicated as packed bits.

On the published graphs this gives 30 ideals (BERT-24 layers) to 36,596 (Inception-v3
layers), the same counts the paper's program prints for its own contraction of the layer
graphs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from jaxplace_cli.suggest.model import Graph

MAX_IDEALS = 60_000  # the paper's IDEALS_LIMIT; beyond it memory (ideals x values) grows too large


@dataclass
class Lattice:
    """``cls[v]``: lattice node of graph node ``v``; ``member``: ideals as rows of a bool matrix
    over lattice nodes, by size (row 0 the empty set, the last row every node); ``words``: the same rows packed into uint64 words (subset tests)."""

    cls: np.ndarray
    c: int
    edges: np.ndarray  # (m, 2) ordering edges between lattice nodes
    member: np.ndarray | None = None
    words: np.ndarray | None = None
    notes: list | None = None
    level: np.ndarray | None = None  # ideals of size s are rows level[s]:level[s + 1]
    up: np.ndarray | None = None  # (ideal, immediate sub-ideal) pairs


def _first_order(lab: np.ndarray) -> np.ndarray:
    """Relabel so that labels appear in order of their first node (stable output)."""
    _, first, inv = np.unique(lab, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inv].astype(np.int64)


def contiguity_classes(n: int, src, dst, color, backward) -> Lattice:
    """Lattice nodes and their ordering edges (module docstring)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    color = np.asarray(color, dtype=np.int64)
    bwd = np.zeros(n, dtype=bool) if backward is None else np.asarray(backward, dtype=bool)
    key = np.where(color >= 0, color, -1 - np.arange(n))
    _, cls = np.unique(key, return_inverse=True)
    cls = _first_order(cls.astype(np.int64))
    notes = []
    while True:
        c = int(cls.max()) + 1 if n else 0
        has_fwd = np.zeros(c, dtype=bool)
        has_fwd[cls[~bwd]] = True
        fwd_e = ~bwd[src] & ~bwd[dst]
        a, b = cls[src[fwd_e]], cls[dst[fwd_e]]
        bb = bwd[src] & bwd[dst]
        orphan_e = bb & (~has_fwd[cls[src]] | ~has_fwd[cls[dst]])
        a = np.concatenate([a, cls[dst[orphan_e]]])  # mirrored: backward u->v orders v before u
        b = np.concatenate([b, cls[src[orphan_e]]])
        keep = a != b
        a, b = a[keep], b[keep]
        if c == 0:
            return Lattice(cls, 0, np.zeros((0, 2), dtype=np.int64), notes=notes)
        g = sparse.coo_matrix((np.ones(a.size, dtype=np.int8), (a, b)), shape=(c, c))
        ncomp, scc = connected_components(g, directed=True, connection="strong")
        if ncomp == c:
            pairs = np.unique(np.stack([a, b], axis=1), axis=0) if a.size else np.zeros((0, 2), dtype=np.int64)
            if (~has_fwd).any():
                notes.append(f"{int((~has_fwd).sum())} backward-only colour class(es) ordered like the paper's "
                             "artificial forward nodes")
            return Lattice(cls, c, pairs.astype(np.int64), notes=notes)
        notes.append(f"{c - ncomp} colour class(es) merged: they reach each other in the forward graph")
        cls = _first_order(scc[cls].astype(np.int64))


def _dedupe(rows: np.ndarray):
    """(first index of each distinct row, row -> its distinct index), distinct rows in order
    of first appearance. A dict for the small levels most DAGs have (np.unique on rows costs
    a sort of a structured view, ~0.5 ms even for two rows)."""
    if rows.shape[0] > 512:
        _, keep, inv = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(keep, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return keep[order], rank[inv.ravel()]
    seen: dict = {}
    inv = np.empty(rows.shape[0], dtype=np.int64)
    for i, row in enumerate(rows):
        inv[i] = seen.setdefault(row.tobytes(), len(seen))
    keep = np.zeros(len(seen), dtype=np.int64)
    keep[inv[::-1]] = np.arange(rows.shape[0])[::-1]
    return keep, inv


def enumerate_ideals(lat: Lattice, limit: int = MAX_IDEALS) -> bool:
    """Fill ``lat.member``/``words``/``level``/``up`` with every ideal, by size (level s holds
    the ideals of s lattice nodes; row 0 is the empty set, the last row every node); ``up``
    pairs (ideal, ideal minus one of its maximal nodes). False when there are more than
    ``limit``."""
    c = lat.c
    preds_t = sparse.csr_matrix((np.ones(len(lat.edges), dtype=np.float32),
                                 (lat.edges[:, 1], lat.edges[:, 0])), shape=(c, c))  # row v: v's predecessors
    level = np.zeros((1, c), dtype=bool)
    out = [level]
    starts = [0]
    up = []
    total = 1
    for _ in range(c):
        missing = np.asarray(preds_t.dot((~level).T.astype(np.float32)).T) if lat.edges.size \
            else np.zeros(level.shape, dtype=np.float32)
        addable = ~level & (missing == 0)
        r, v = np.nonzero(addable)
        if r.size == 0:
            break
        nxt = level[r]
        nxt[np.arange(r.size), v] = True
        keep, inv = _dedupe(np.packbits(nxt, axis=1))
        up.append(np.stack([total + inv, starts[-1] + r], axis=1))
        level = nxt[keep]
        starts.append(total)
        total += level.shape[0]
        if total > limit:
            return False
        out.append(level)
    lat.member = np.concatenate(out, axis=0)
    lat.level = np.array(starts + [total], dtype=np.int64)
    lat.up = np.concatenate(up, axis=0).astype(np.int64) if up else np.zeros((0, 2), dtype=np.int64)
    nbytes = -(-c // 64) * 8
    packed = np.packbits(lat.member, axis=1)
    pad = np.zeros((packed.shape[0], nbytes), dtype=np.uint8)
    pad[:, :packed.shape[1]] = packed
    lat.words = pad.view(np.uint64)
    return True


def merge_free_leaves(lat: Lattice, free: np.ndarray, inc_x: np.ndarray, inc_c: np.ndarray) -> int:
    """Merge a class that costs nothing anywhere (``free``: no compute on any device, allowed
    everywhere, no memory that a cap could count) into the one class ``m`` it touches: its
    only ordering neighbour is ``m`` and every value it touches (hyperedge ``inc_x``/``inc_c``
    incidences) also touches ``m``. Exact: moving it to m's stage removes it from its
    own stage (whose load cannot rise) and can only make values of m's stage less split;
    the stages stay ideals since it is a source or a sink next to m. The paper's program
    merges the same leaves (zero-latency nodes with one neighbour) on the published graphs;
    without it GNMT has over 200,000 ideals, with it 17,914. Returns how many merged."""
    total = 0
    while True:
        c = lat.c
        nbr: list[set] = [set() for _ in range(c)]
        for a, b in lat.edges.tolist():
            nbr[a].add(b)
            nbr[b].add(a)
        members: dict = {}
        for x, cl in zip(inc_x.tolist(), inc_c.tolist()):
            members.setdefault(x, set()).add(cl)
        touching: list[list] = [[] for _ in range(c)]
        for s in members.values():
            for cl in s:
                touching[cl].append(s)
        target = np.arange(c)
        sources: set = set()
        targets: set = set()
        for n in np.flatnonzero(free[:c]).tolist():
            if len(nbr[n]) > 1 or n in targets:
                continue
            common = set.intersection(*touching[n]) - {n} if touching[n] else set(range(c)) - {n}
            if nbr[n]:
                common &= nbr[n]
            common -= sources
            if not common:
                continue
            m = min(common)
            target[n] = m
            sources.add(n)
            targets.add(m)
        merged = int((target != np.arange(c)).sum())
        if not merged:
            return total
        total += merged
        new = _first_order(target)
        lat.cls = new[lat.cls]
        lat.c = int(new.max()) + 1
        e = new[lat.edges]
        e = e[e[:, 0] != e[:, 1]]
        lat.edges = np.unique(e, axis=0) if e.size else np.zeros((0, 2), dtype=np.int64)
        merged_free = np.ones(lat.c, dtype=bool)
        np.logical_and.at(merged_free, new, free[:c])
        free = merged_free
        inc_c = new[inc_c]


def value_costs(g: Graph):
    """Per value: its transfer time (the largest over its uses) and the (value, node)
    incidences of its producer and consumers."""
    vals, inv = np.unique(g.value, return_inverse=True) if g.m else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    cost = np.zeros(vals.size, dtype=np.int64)
    np.maximum.at(cost, inv, g.comm)
    x = np.concatenate([inv, inv])
    v = np.concatenate([g.src, g.dst])
    return cost, x.astype(np.int64), v.astype(np.int64)


def stage_loads(g: Graph, assign: np.ndarray) -> np.ndarray:
    """Per-device load of any placement in this model (the paper's ``computeLoadForResult``):
    compute time, plus on non-host devices the cost of each value that touches the device
    and another one."""
    a = np.asarray(assign, dtype=np.int64)
    load = np.zeros(g.k, dtype=np.int64)
    np.add.at(load, a, g.unary[np.arange(g.n), a])
    cost, x, v = value_costs(g)
    if x.size:
        pairs = np.unique(np.stack([x, a[v]], axis=1), axis=0)
        ndev = np.bincount(pairs[:, 0], minlength=cost.size)
        split = pairs[ndev[pairs[:, 0]] > 1]
        np.add.at(load, split[:, 1], cost[split[:, 0]])
        if g.host is not None:
            host_load = np.zeros(g.k, dtype=np.int64)
            np.add.at(host_load, a, g.unary[np.arange(g.n), a])
            load = np.where(np.asarray(g.host, dtype=bool), host_load, load)
    return load


def contiguous(g: Graph, assign: np.ndarray) -> bool:
    """Whether ``assign`` is a placement of this model: colour classes together, and the
    devices in some order such that each prefix of stages is an ideal of the forward DAG
    (a device's stage is then a contiguous set). Used by tests and the bench to check any
    answer, ours or the paper program's."""
    a = np.asarray(assign, dtype=np.int64)
    lat = contiguity_classes(g.n, g.src, g.dst, g.color, g.backward)
    dev = np.full(lat.c, -1, dtype=np.int64)
    for c, d in zip(lat.cls.tolist(), a.tolist()):
        if dev[c] not in (-1, d):
            return False
        dev[c] = d
    # stage order: device d before e when an ordering edge goes from d's stage to e's
    e = lat.edges
    pairs = {(int(x), int(y)) for x, y in zip(dev[e[:, 0]], dev[e[:, 1]]) if x != y} if e.size else set()
    used = sorted(set(dev.tolist()))
    order: list = []
    left = set(used)
    while left:
        ready = [d for d in left if not any((x, d) in pairs for x in left if x != d)]
        if not ready:
            return False  # two stages each need the other first
        order.append(min(ready))
        left.discard(order[-1])
    return True
