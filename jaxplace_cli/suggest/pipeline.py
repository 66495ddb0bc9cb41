"""``throughput``: split the ops into contiguous pipeline stages, one per device, minimising
the load of the busiest device (the steady-state time per item of a pipeline).

Formulation (the contiguous variant of Tarnawski et al., NeurIPS 2020): ops keep their
topological order (a run's dispatch order; colour classes — e.g. a layer's forward and
backward op — are merged first and placed at their earliest member); stage j is an interval
of that order and runs on device j. A device's load is its compute time plus, for every
value crossing its stage boundary, the value's transfer time: once for each value it sends
out and once for each value it receives (a value read by several ops of one stage is moved
once). Caps: ops a device may not run, and memory per device.

Exact method: with ``L_d(s, i)`` the load of interval [s, i) on device d,
``best_j(i) = min_s max(best_{j-1}(s), L_j(s, i))`` — a dynamic program over stage ends,
O(devices x n^2) with numpy. L is built for all intervals at once: for a fixed start s each
value adds its cost to a range of ends i, found from its producer's position and the first,
smallest and largest positions of its consumers. Devices that differ (pins, speeds, caps)
are tried in every order (small graphs) so stage order does not hide the optimum.
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from jaxplace_cli.suggest.coarsen import color_groups
from jaxplace_cli.suggest.model import Graph, Solution

INF = np.iinfo(np.int64).max // 4
MAX_POSITIONS = 3000


def _coarse(g: Graph, groups: np.ndarray):
    c = int(groups.max()) + 1 if groups.size else 0
    unary = np.zeros((c, g.k), dtype=np.int64)
    np.add.at(unary, groups, g.unary)
    allowed = np.ones((c, g.k), dtype=bool)
    np.logical_and.at(allowed, groups, g.allowed)
    mem = np.bincount(groups, weights=g.mem, minlength=c).astype(np.int64)
    return c, unary, allowed, mem


def _values(g: Graph, groups: np.ndarray):
    """Per value crossing groups: producer position, consumer positions, cost."""
    ps, pd = groups[g.src], groups[g.dst]
    ext = ps != pd
    vals, ps, pd, cost = g.value[ext], ps[ext], pd[ext], g.comm[ext]
    if vals.size == 0:
        return (np.zeros(0, dtype=np.int64),) * 3 + ([],)
    uniq, inv = np.unique(vals, return_inverse=True)
    prod = np.zeros(uniq.size, dtype=np.int64)
    prod[inv] = ps
    vcost = np.zeros(uniq.size, dtype=np.int64)
    np.maximum.at(vcost, inv, cost)
    pairs = sorted(set(zip(inv.tolist(), pd.tolist())))
    return prod, vcost, uniq, pairs


def comm_matrix(n: int, prod, vcost, pairs) -> np.ndarray:
    """``C[s, i]``: transfer time in and out of the interval [s, i) (0 <= s <= i <= n)."""
    nv = prod.size
    C = np.zeros((n + 1, n + 1), dtype=np.int64)
    if nv == 0:
        return C
    big = n + 5
    minc = np.full(nv, big, dtype=np.int64)
    maxc = np.full(nv, -1, dtype=np.int64)
    by_pos: list[list[int]] = [[] for _ in range(n)]
    for x, c in pairs:
        minc[x] = min(minc[x], c)
        maxc[x] = max(maxc[x], c)
        by_pos[c].append(x)
    f = np.full(nv, big, dtype=np.int64)  # first consumer position >= s
    for s in range(n - 1, -1, -1):
        if by_pos[s]:
            f[np.array(by_pos[s], dtype=np.int64)] = s
        diff = np.zeros(n + 3, dtype=np.int64)
        ge = prod >= s
        a = ge & (minc < s)  # producer inside, a consumer before s: out for every end
        np.add.at(diff, prod[a] + 1, vcost[a])
        b = ge & (minc >= s) & (maxc > prod)  # out while some consumer lies at or after the end
        np.add.at(diff, prod[b] + 1, vcost[b])
        np.add.at(diff, maxc[b] + 1, -vcost[b])
        c = ~ge & (f < big)  # producer before s: in once a consumer is inside
        np.add.at(diff, f[c] + 1, vcost[c])
        d = ge & (f < prod)  # producer after the end, a consumer inside (merged classes)
        np.add.at(diff, f[d] + 1, vcost[d])
        np.add.at(diff, prod[d] + 1, -vcost[d])
        row = np.cumsum(diff)
        C[s, s + 1:] = row[s + 1:n + 1]
    return C


def _interval_loads(n, unary_d, bad_d, mem, cap_d, C):
    """``L[s, i]`` for one device; INF where the interval is infeasible or s > i."""
    P = np.concatenate([[0], np.cumsum(unary_d)])
    B = np.concatenate([[0], np.cumsum(bad_d.astype(np.int64))])
    L = P[None, :] - P[:, None] + C
    bad = (B[None, :] - B[:, None]) > 0
    if cap_d is not None:
        M = np.concatenate([[0], np.cumsum(mem)])
        bad |= (M[None, :] - M[:, None]) > cap_d
    bad |= np.tri(n + 1, k=-1, dtype=bool)  # s > i
    L[bad] = INF
    return L


def _dp(n, Ls):
    """Stages in the given device order; returns (max load, stage start positions)."""
    dp = np.full(n + 1, INF, dtype=np.int64)
    dp[0] = 0
    args = []
    for L in Ls:
        M = np.maximum(dp[:, None], L)
        args.append(M.argmin(axis=0))
        dp = M.min(axis=0)
    if dp[n] >= INF:
        return INF, None
    starts = []
    i = n
    for arg in reversed(args):
        s = int(arg[i])
        starts.append((s, i))
        i = s
    return int(dp[n]), starts[::-1]


def solve_throughput(g: Graph, max_positions: int = MAX_POSITIONS) -> Solution:
    t0 = time.perf_counter()
    notes = []
    groups = color_groups(g.color)
    n = int(groups.max()) + 1 if groups.size else 0
    if n > max_positions:
        block = -(-n // max_positions)
        groups = groups // block
        n = int(groups.max()) + 1
        notes.append(f"{g.n} ops in blocks of {block} consecutive ops: optimal for splits at block boundaries")
    n, unary, allowed, mem = _coarse(g, groups)
    prod, vcost, _, pairs = _values(g, groups)
    C = comm_matrix(n, prod, vcost, pairs)
    caps = None if g.mem_cap is None else np.broadcast_to(np.asarray(g.mem_cap), (g.k,))
    Ls = [_interval_loads(n, unary[:, d], ~allowed[:, d], mem, None if caps is None else caps[d], C)
          for d in range(g.k)]
    same = (all((unary[:, d] == unary[:, 0]).all() for d in range(g.k))
            and allowed.all() and (caps is None or np.unique(caps).size == 1))
    if same:
        orders = [tuple(range(g.k))]
    elif g.k <= 4 and n <= 600:
        orders = list(itertools.permutations(range(g.k)))
    else:
        orders = [tuple(range(g.k))]
        notes.append("devices differ; only their listed order was tried")
    best, best_order, best_starts = INF, None, None
    for order in orders:
        value, starts = _dp(n, [Ls[d] for d in order])
        if value < best:
            best, best_order, best_starts = value, order, starts
    if best_starts is None:
        raise ValueError("no contiguous split into one stage per device respects the pinned ops and "
                         "memory caps (e.g. explicit device_puts alternating between devices); try "
                         "--retarget-puts or another objective")
    pos_dev = np.zeros(n, dtype=np.int64)
    for (s, i), d in zip(best_starts, best_order):
        pos_dev[s:i] = d
    assign = pos_dev[groups]
    notes.append("stages: " + ", ".join(f"{g.devices[d]}=[{s},{i})" for (s, i), d in zip(best_starts, best_order)))
    return Solution(assign, best, "pipeline-dp", best, True, time.perf_counter() - t0, notes)


def pipeline_loads(g: Graph, assign: np.ndarray) -> np.ndarray:
    """Per-device load of any placement under the same cost model (used to check the DP)."""
    a = np.asarray(assign, dtype=np.int64)
    load = np.bincount(a, weights=g.unary[np.arange(g.n), a], minlength=g.k).astype(np.int64)
    seen_out, seen_in = set(), set()
    for x, s, d, c in zip(g.value.tolist(), g.src.tolist(), g.dst.tolist(), g.comm.tolist()):
        ds, dd = int(a[s]), int(a[d])
        if ds == dd:
            continue
        if x not in seen_out:
            seen_out.add(x)
            load[ds] += c
        if (x, dd) not in seen_in:
            seen_in.add((x, dd))
            load[dd] += c
    return load
