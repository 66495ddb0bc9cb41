"""Exact s-t minimum cuts on integer capacities.

Why the care: ``scipy.sparse.csgraph.maximum_flow`` (Dinic, in C) is fast but silently
casts capacities to 32-bit integers, and a transfer graph's byte counts easily exceed 2**31.
Capacities are first divided by their common divisor (byte sizes share large powers of two);
an arc that still does not fit becomes several parallel two-arc paths through new nodes,
each within 32 bits — the same cut values, so the answer stays exact. The pure-Python Dinic
below works on exact Python integers; it is the independent cross-check used by the tests
(``engine="python"``).
"""
from __future__ import annotations

from collections import deque

import numpy as np

INT32_MAX = 2**31 - 1


def min_cut(n: int, tails, heads, caps, s: int, t: int, engine: str = "auto"):
    """Minimum s-t cut of a directed graph on nodes ``0..n-1`` (exact on any integers).

    Returns ``(value, source_side)`` where ``source_side`` is a bool array: the nodes still
    reachable from ``s`` in the residual graph (the cut closest to the source, which makes
    the answer unique for a given input). ``engine``: ``auto``, ``scipy`` or ``python``.
    """
    # scipy.sparse costs ~0.3 s to import: paid by the audits that solve a cut, not by every audit
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    tails = np.asarray(tails, dtype=np.int64)
    heads = np.asarray(heads, dtype=np.int64)
    caps = np.asarray(caps, dtype=np.int64)
    keep = (caps > 0) & (tails != heads)
    tails, heads, caps = tails[keep], heads[keep], caps[keep]
    if caps.size == 0:
        side = np.zeros(n, dtype=bool)
        side[s] = True
        return 0, side
    div = _gcd_all(caps)
    scaled = caps // div
    mat = csr_matrix((scaled, (tails, heads)), shape=(n, n))  # duplicates summed
    mat.sum_duplicates()
    if engine == "python":
        value, side = _dinic(n, mat, s, t)
        return value * div, side
    coo = mat.tocoo()
    rows, cols, data, total = _split_wide(coo.row.astype(np.int64), coo.col.astype(np.int64),
                                          coo.data.astype(np.int64), n)
    mat32 = csr_matrix((data.astype(np.int32), (rows, cols)), shape=(total, total))
    mat32.sum_duplicates()
    res = maximum_flow(mat32, s, t, method="dinic")
    flow = res.flow.tocsr()
    # residual capacity: forward cap - flow; reverse arcs carry +flow
    resid = (mat32.astype(np.int64) - flow.astype(np.int64)).tocsr()
    resid.data[resid.data < 0] = 0
    resid.eliminate_zeros()
    reach = breadth_first_order(resid, s, directed=True, return_predecessors=False)
    side = np.zeros(total, dtype=bool)
    side[reach] = True
    return int(res.flow_value) * div, side[:n]


def _split_wide(rows, cols, data, n):
    """Arcs above 32 bits -> parallel paths a -> x_i -> b of at most INT32_MAX each."""
    wide = data > INT32_MAX
    if not wide.any():
        return rows, cols, data, n
    keep = ~wide
    out_r, out_c, out_d = [rows[keep]], [cols[keep]], [data[keep]]
    nxt = n
    for a, b, c in zip(rows[wide].tolist(), cols[wide].tolist(), data[wide].tolist()):
        parts = -(-c // INT32_MAX)
        base, rem = divmod(c, parts)
        caps = np.full(parts, base, dtype=np.int64)
        caps[:rem] += 1
        aux = np.arange(nxt, nxt + parts, dtype=np.int64)
        nxt += parts
        out_r += [np.full(parts, a, dtype=np.int64), aux]
        out_c += [aux, np.full(parts, b, dtype=np.int64)]
        out_d += [caps, caps]
    return np.concatenate(out_r), np.concatenate(out_c), np.concatenate(out_d), nxt


def _gcd_all(values: np.ndarray) -> int:
    return max(int(np.gcd.reduce(values)), 1) if values.size else 1


def _dinic(n: int, mat, s: int, t: int):
    """Dinic's algorithm on Python integers: level graph by BFS, blocking flow by an
    iterative DFS with current-arc pointers. Arc ``i ^ 1`` is the reverse of arc ``i``."""
    coo = mat.tocoo()
    head: list[int] = []
    cap: list[int] = []
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b, c in zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist()):
        adj[a].append(len(head))
        head.append(b)
        cap.append(int(c))
        adj[b].append(len(head))
        head.append(a)
        cap.append(0)
    total = 0
    while True:
        level = [-1] * n
        level[s] = 0
        q = deque([s])
        while q:
            x = q.popleft()
            for arc in adj[x]:
                y = head[arc]
                if cap[arc] > 0 and level[y] < 0:
                    level[y] = level[x] + 1
                    q.append(y)
        if level[t] < 0:
            break
        it = [0] * n
        while True:
            pushed = _augment(s, t, adj, head, cap, level, it)
            if not pushed:
                break
            total += pushed
    side = np.zeros(n, dtype=bool)
    side[s] = True
    q = deque([s])
    while q:
        x = q.popleft()
        for arc in adj[x]:
            y = head[arc]
            if cap[arc] > 0 and not side[y]:
                side[y] = True
                q.append(y)
    return total, side


def _augment(s, t, adj, head, cap, level, it) -> int:
    """One augmenting path in the level graph (iterative DFS); returns the flow pushed."""
    path: list[int] = []  # arcs
    x = s
    while True:
        if x == t:
            pushed = min(cap[a] for a in path)
            for a in path:
                cap[a] -= pushed
                cap[a ^ 1] += pushed
            return pushed
        arcs = adj[x]
        advanced = False
        while it[x] < len(arcs):
            a = arcs[it[x]]
            y = head[a]
            if cap[a] > 0 and level[y] == level[x] + 1:
                path.append(a)
                x = y
                advanced = True
                break
            it[x] += 1
        if advanced:
            continue
        if not path:
            return 0
        level[x] = -1  # dead end: prune it from this phase
        a = path.pop()
        x = head[a ^ 1]
        it[x] += 1
