"""Multilevel partitioning for placements with load or memory caps (and for any size).

The METIS recipe, written for this cost model (compute per device + cut edges, pins, caps):
1. *coarsen*: repeatedly merge each node with the unmatched neighbour it shares the heaviest
   edge with (heavy edges are what must not be cut), never merging nodes without a common
   allowed device or beyond a load limit;
2. *initial placement* on the small coarse graph: greedy growing from several seeded starts
   (topological order first: for dataflow graphs, contiguous blocks cut few edges);
3. *uncoarsen*: project back level by level and refine by greedy moves of boundary nodes to
   the device that lowers the cost most while the caps hold.
Everything random comes from ``numpy.random.default_rng(seed)``, and no step depends on the
clock, so the same input and seed give the same placement.
"""
from __future__ import annotations

import time

import numpy as np

from jaxplace_cli.suggest.coarsen import contract
from jaxplace_cli.suggest.model import Partition, Solution, cost, feasible


def multilevel(p: Partition, seed: int = 0, tries: int = 6, passes: int = 8) -> Solution:
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    levels: list[tuple[Partition, np.ndarray]] = []
    cur = p
    target = max(20 * p.k, 60)
    max_load = _merge_limit(p)
    while cur.n > target:
        groups = heavy_edge_matching(cur, rng, max_load)
        coarse_n = int(groups.max()) + 1
        if coarse_n > 0.95 * cur.n:
            break
        levels.append((cur, groups))
        cur = contract(cur, groups)
    labels = _initial(cur, rng, tries, passes)
    for fine, groups in reversed(levels):
        labels = refine(fine, labels[groups], rng, passes)
    labels = refine(p, labels, rng, passes * 2)
    notes = [f"{len(levels)} coarsening level(s), coarsest {cur.n} nodes"]
    if not feasible(p, labels):
        notes.append("no placement found that meets every cap; the result exceeds one")
    return Solution(labels, cost(p, labels), "multilevel", None, False, time.perf_counter() - t0, notes)


def _merge_limit(p: Partition) -> float:
    """Merged nodes must stay small enough to be balanced later: a fraction of one cap."""
    if p.load_cap is None:
        return float("inf")
    return max(p.load_cap / 3.0, float(p.load.max()) if p.n else 0.0)


def _adjacency(p: Partition):
    """CSR adjacency (both directions) as Python lists: the refinement loops are scalar."""
    n = p.n
    heads = np.concatenate([p.u, p.v])
    tails = np.concatenate([p.v, p.u])
    ws = np.concatenate([p.w, p.w])
    order = np.lexsort((tails, heads))
    heads, tails, ws = heads[order], tails[order], ws[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(ptr, heads + 1, 1)
    ptr = np.cumsum(ptr)
    return ptr.tolist(), tails.tolist(), ws.tolist()


def heavy_edge_matching(p: Partition, rng, max_load: float) -> np.ndarray:
    """Group labels (numbered in node order) pairing each node with its heaviest-edge
    unmatched neighbour that can share a device with it."""
    ptr, nbr, wt = _adjacency(p)
    n = p.n
    match = [-1] * n
    allowed = (p.allowed.astype(np.int64) << np.arange(p.k, dtype=np.int64)).sum(axis=1).tolist()
    load = p.load.tolist()
    for v in rng.permutation(n).tolist():
        if match[v] >= 0:
            continue
        best, best_w = -1, 0
        for i in range(ptr[v], ptr[v + 1]):
            x = nbr[i]
            if match[x] >= 0 or x == v or not (allowed[v] & allowed[x]):
                continue
            if load[v] + load[x] > max_load:
                continue
            if wt[i] > best_w or (wt[i] == best_w and best >= 0 and x < best):
                best, best_w = x, wt[i]
        if best >= 0:
            match[v], match[best] = best, v
        else:
            match[v] = v
    groups = np.full(n, -1, dtype=np.int64)
    g = 0
    for v in range(n):
        if groups[v] < 0:
            groups[v] = g
            groups[match[v]] = g
            g += 1
    return groups


def _initial(p: Partition, rng, tries: int, passes: int) -> np.ndarray:
    best, best_key = None, None
    for t in range(tries):
        order = np.arange(p.n) if t == 0 else _bfs_order(p, int(rng.integers(p.n)) if p.n else 0)
        labels = refine(p, greedy(p, order), rng, passes)
        key = (not feasible(p, labels), cost(p, labels))
        if best_key is None or key < best_key:
            best, best_key = labels, key
    return best


def _bfs_order(p: Partition, start: int) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import breadth_first_order

    n = p.n
    mat = coo_matrix((np.ones(p.u.size), (p.u, p.v)), shape=(n, n)).tocsr()
    seen = np.zeros(n, dtype=bool)
    out = []
    for s in [start] + list(range(n)):
        if seen[s]:
            continue
        part = breadth_first_order(mat, s, directed=False, return_predecessors=False)
        part = part[~seen[part]]
        seen[part] = True
        out.append(part)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def greedy(p: Partition, order: np.ndarray) -> np.ndarray:
    """Place nodes one by one (in ``order``) on the allowed device with room that adds the
    least cost given the nodes already placed."""
    ptr, nbr, wt = _adjacency(p)
    k = p.k
    labels = [-1] * p.n
    load = [0] * k
    mem = [0] * k
    lcap = p.load_cap if p.load_cap is not None else None
    mcap = None if p.mem_cap is None else np.broadcast_to(np.asarray(p.mem_cap), (k,)).tolist()
    unary = p.unary.tolist()
    allowed = p.allowed.tolist()
    nl, nm = p.load.tolist(), p.mem.tolist()
    for v in order.tolist():
        conn = [0] * k
        for i in range(ptr[v], ptr[v + 1]):
            lx = labels[nbr[i]]
            if lx >= 0:
                conn[lx] += wt[i]
        total = sum(conn)
        best, best_key = -1, None
        for d in range(k):
            if not allowed[v][d]:
                continue
            over = 0
            if lcap is not None:
                over += max(0, load[d] + nl[v] - lcap)
            if mcap is not None:
                over += max(0, mem[d] + nm[v] - mcap[d])
            key = (over, unary[v][d] + total - conn[d], load[d], d)
            if best_key is None or key < best_key:
                best, best_key = d, key
        labels[v] = best
        load[best] += nl[v]
        mem[best] += nm[v]
    return np.array(labels, dtype=np.int64)


def refine(p: Partition, labels: np.ndarray, rng, passes: int) -> np.ndarray:
    # long: the refinement's inner loop keeps gains, loads and the active set in locals on
    # purpose (a helper call per move cost ~30 % of a 100k-node solve)
    """Greedy k-way refinement: move a node to the device that lowers the cost most while
    every cap holds (moves off an over-full device are taken even at a loss).

    Only *active* nodes are visited: at first those with an edge to another device, a
    device-dependent compute cost, or an over-full device; then the neighbours of moved
    nodes. Interior nodes of a part cannot gain from a move, so large graphs cost little.
    """
    k, n = p.k, p.n
    if n == 0:
        return labels.copy()
    ptr, nbr, wt = _adjacency(p)
    labels = np.asarray(labels, dtype=np.int64)
    lcap = p.load_cap
    mcap = None if p.mem_cap is None else np.broadcast_to(np.asarray(p.mem_cap), (k,)).tolist()
    load = np.bincount(labels, weights=p.load, minlength=k).astype(np.int64).tolist()
    mem = np.bincount(labels, weights=p.mem, minlength=k).astype(np.int64).tolist()
    varying = (p.unary != p.unary[:, :1]).any(axis=1)
    cut = labels[p.u] != labels[p.v]
    active = varying.copy()
    active[p.u[cut]] = True
    active[p.v[cut]] = True
    overfull = [d for d in range(k) if (lcap is not None and load[d] > lcap)
                or (mcap is not None and mem[d] > mcap[d])]
    if overfull:
        active |= np.isin(labels, overfull)
    # connection weight of each active node to each device, filled lazily
    conn: dict[int, list] = {}
    lab = labels.tolist()

    def connection(v):
        row = conn.get(v)
        if row is None:
            row = [0] * k
            for i in range(ptr[v], ptr[v + 1]):
                row[lab[nbr[i]]] += wt[i]
            conn[v] = row
        return row

    unary = p.unary
    allowed = p.allowed
    nl, nm = p.load.tolist(), p.mem.tolist()

    def over(d, extra_load, extra_mem):
        o = 0
        if lcap is not None and load[d] + extra_load > lcap:
            o += load[d] + extra_load - lcap
        if mcap is not None and mem[d] + extra_mem > mcap[d]:
            o += mem[d] + extra_mem - mcap[d]
        return o

    todo = np.flatnonzero(active)
    for _ in range(passes):
        if todo.size == 0:
            break
        nxt = set()
        for v in todo[rng.permutation(todo.size)].tolist():
            cur = lab[v]
            row = connection(v)
            total = sum(row)
            over_cur = over(cur, 0, 0)
            uv = unary[v].tolist()
            av = allowed[v].tolist()
            here = uv[cur] + total - row[cur]
            best, best_key = cur, (over_cur, 0, 0)
            for d in range(k):
                if d == cur or not av[d]:
                    continue
                o = over(d, nl[v], nm[v])
                if o > 0 and o >= over_cur:
                    continue
                delta = uv[d] + total - row[d] - here
                # cap violations first, then cost, then balance (lighter device)
                key = (o if over_cur else 0, delta, load[d] + nl[v] - load[cur])
                if key < best_key:
                    best, best_key = d, key
            if best == cur:
                continue
            lab[v] = best
            load[cur] -= nl[v]
            load[best] += nl[v]
            mem[cur] -= nm[v]
            mem[best] += nm[v]
            for i in range(ptr[v], ptr[v + 1]):
                x = nbr[i]
                rx = conn.get(x)
                if rx is not None:
                    rx[cur] -= wt[i]
                    rx[best] += wt[i]
                nxt.add(x)
            nxt.add(v)
        todo = np.array(sorted(nxt), dtype=np.int64)
    return np.array(lab, dtype=np.int64)
