"""``throughput``: contiguous pipeline stages over the ideals of the DAG, minimising the load
of the busiest device — exactly the model of Tarnawski et al. (NeurIPS 2020), whose
program (msr-fiddle/dnn-partitioning ``throughput-dp/dp.cpp``) is the reference.

The model (``ideals.py`` builds the structure):
- a placement is a chain of ideals; each difference is one device's stage; devices of one
  *type* (same costs, pins, memory cap) are interchangeable, a stage may be empty;
- a stage's load on a device: its compute time, plus — unless the device is a *host*
  (the paper's CPU, which holds the data and pays no transfer) — the transfer time of every
  value that crosses the stage's boundary, once per value (a value read by several ops of
  a stage, or sent to several stages, is counted once per stage: the paper's
  "outgoing connection cost" of its producer);
- a stage is infeasible on a device where one of its ops may not run or whose memory cap
  it exceeds.

The dynamic program is the paper's, ``dp[s][I] = min over J < I of max(dp[s - one device of
type t][J], load_t(I \\ J))`` over device-count states ``s``, with two differences that make
it fast in numpy without changing its optimum:
- **a load cutoff T**: only pairs with load <= T are kept (a stage's compute time alone
  must fit, so only ideals J within T of I in compute time are tried: ideals are sorted by
  it and J comes from a window). If the answer is <= T it is the optimum; otherwise T grows
  by 25 % and the search reruns (each failed T is a proven lower bound).
- **the crossing cost of a pair from two per-ideal numbers**: with ``cnt[X, x]`` the number
  of value x's endpoints inside ideal X and ``S(X)`` the values split by X, the values split
  by ``I \\ J`` cost ``C(S(I)) + C(S(J)) - sum over x in S(I) with cnt[J, x] > 0 of c_x (1 +
  [cnt[J, x] == cnt[I, x]])`` — work per pair proportional to the few values cut at I,
  not to the graph (the paper's program walks every node for every pair).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from jaxplace_cli.suggest.ideals import MAX_IDEALS, Lattice, contiguity_classes, enumerate_ideals, merge_free_leaves, value_costs
from jaxplace_cli.suggest.model import Graph, Solution

INF = np.iinfo(np.int64).max // 4
MODEL = "contiguous stages over the DAG's ideals, colour classes kept together (Tarnawski et al. 2020)"


@dataclass
class _Model:
    lat: Lattice
    types: list  # device indices per type
    t_lat: np.ndarray  # (classes, types)
    t_bad: np.ndarray
    size: np.ndarray
    cap: np.ndarray  # per type, INF = none
    host: np.ndarray  # per type
    x_cost: np.ndarray
    x_size: np.ndarray
    inc: tuple  # (value, class) incidences of the values kept
    ell: np.ndarray  # per class: its cheapest compute time (orders the ideals)


def _build(g: Graph) -> _Model:
    lat = contiguity_classes(g.n, g.src, g.dst, g.color, g.backward)
    cost, x, v = value_costs(g)
    cls = lat.cls
    k = g.k
    caps = np.full(k, INF, dtype=np.int64) if g.mem_cap is None else np.broadcast_to(np.asarray(g.mem_cap), (k,))
    host = np.zeros(k, dtype=bool) if g.host is None else np.asarray(g.host, dtype=bool)
    free = np.ones(lat.c, dtype=bool)
    np.logical_and.at(free, cls, (g.unary == 0).all(axis=1) & g.allowed.all(axis=1))
    if int(g.mem.sum()) > int(caps.min()):  # memory could bind: only leaves without memory merge
        np.logical_and.at(free, cls, g.mem == 0)
    inc = np.unique(np.stack([x, cls[v]], axis=1), axis=0) if x.size else np.zeros((0, 2), dtype=np.int64)
    merged = merge_free_leaves(lat, free, inc[:, 0], inc[:, 1])
    if merged:
        lat.notes.append(f"{merged} zero-cost leaf class(es) merged into their only neighbour (exact)")
    cls = lat.cls
    c = lat.c
    per_dev = np.zeros((c, k), dtype=np.int64)
    np.add.at(per_dev, cls, g.unary)
    bad = np.zeros((c, k), dtype=bool)
    np.logical_or.at(bad, cls, ~g.allowed)
    size = np.bincount(cls, weights=g.mem, minlength=c).astype(np.int64)
    groups: dict = {}
    for d in range(k):
        key = (per_dev[:, d].tobytes(), bad[:, d].tobytes(), int(caps[d]), bool(host[d]))
        groups.setdefault(key, []).append(d)
    types = list(groups.values())
    first = [t[0] for t in types]
    inc = np.unique(np.stack([x, cls[v]], axis=1), axis=0) if x.size else np.zeros((0, 2), dtype=np.int64)
    xs = np.bincount(inc[:, 0], minlength=cost.size) if inc.size else np.zeros(cost.size, dtype=np.int64)
    keep = (xs > 1) & (cost > 0)
    ren = np.cumsum(keep) - 1
    inc = inc[keep[inc[:, 0]]] if inc.size else inc
    pairs = (ren[inc[:, 0]], inc[:, 1]) if inc.size else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    t_lat, t_bad = per_dev[:, first], bad[:, first]
    if (t_bad.all(axis=1)).any():
        raise ValueError("an op (or a colour class) may run on no device of this problem")
    ell = np.where(t_bad, INF, t_lat).min(axis=1)
    return _Model(lat, types, t_lat, t_bad, size, caps[first].astype(np.int64), host[first],
                  cost[keep], xs[keep], pairs, ell)


class _Tables:
    """Per-ideal sums: compute time per type, forbidden ops, memory, value endpoints inside."""

    def __init__(self, m: _Model):
        member = m.lat.member
        f = member.astype(np.float64)
        self.lat = np.rint(f @ m.t_lat.astype(np.float64)).astype(np.int64)
        self.bad = np.rint(f @ m.t_bad.astype(np.float64)).astype(np.int64)
        self.size = np.rint(f @ m.size.astype(np.float64)).astype(np.int64)
        nx = m.x_cost.size
        xi, ci = m.inc
        from scipy import sparse  # ~0.3 s: imported by the solves that use it

        amat = sparse.csr_matrix((np.ones(xi.size, dtype=np.float64), (xi, ci)), shape=(nx, m.lat.c))
        cnt = np.asarray(amat.dot(f.T)).T if nx else np.zeros((member.shape[0], 0))
        self.cnt = np.rint(cnt).astype(np.int16 if m.x_size.size == 0 or m.x_size.max() < 32000 else np.int32)
        split = (self.cnt > 0) & (self.cnt < m.x_size[None, :])
        self.split = split
        self.cs = np.rint(split.astype(np.float64) @ m.x_cost.astype(np.float64)).astype(np.int64)
        self.ncut = split.sum(axis=1).astype(np.int64)
        self.cut_ptr = np.concatenate([[0], np.cumsum(self.ncut)[:-1]]).astype(np.int64)
        rows, self.cut_idx = (a.astype(np.int64) for a in np.nonzero(split))
        self.cut_cost = m.x_cost.astype(np.float64)[self.cut_idx]  # per (ideal, value cut there)
        self.cut_cnt = self.cnt[rows, self.cut_idx]
        self.nx = nx
        self.cnt_flat = self.cnt.ravel()
        self.ell = np.rint(f @ m.ell.astype(np.float64)).astype(np.int64)
        self.ell_pad = np.full(-(-self.ell.size // 64) * 64, -INF, dtype=np.int64)  # padding bits are never set
        self.ell_pad[:self.ell.size] = self.ell
        self.words = m.lat.words
        self.m = m

    def candidates(self, i: int, cutoff: int, reach: np.ndarray) -> np.ndarray:
        """Reachable proper sub-ideals J of ideal i within ``cutoff`` of it in compute time."""
        r = np.flatnonzero(reach[:i] & (self.ell[:i] >= self.ell[i] - cutoff))
        inside = ~(self.words[r] & ~self.words[i]).any(axis=1)
        return r[inside]

    def pair_loads(self, sup: np.ndarray, sub: np.ndarray, cutoff: int) -> np.ndarray:
        """(types, pairs): the load of stage ``I \\ J`` for pairs of ideals (J inside I) on each
        type, INF where infeasible or above ``cutoff``."""
        m = self.m
        comm = (self.cs[sup] + self.cs[sub]).astype(np.float64)
        ncut = self.ncut[sup]
        total = int(ncut.sum())
        if total:
            # pair by pair, the values cut at I (47M entries on gnmt_training): one repeat per array
            # and a segmented sum (integer costs: exact in any order). pair_loads 1.93 -> 1.47 s there
            start = np.cumsum(ncut) - ncut
            pos = np.arange(total) + np.repeat(self.cut_ptr[sup] - start, ncut)
            a = self.cnt_flat[np.repeat(sub * self.nx, ncut) + self.cut_idx[pos]]
            w = self.cut_cost[pos] * ((a > 0).astype(np.float64) + (a == self.cut_cnt[pos]))
            has = ncut > 0
            comm[has] -= np.add.reduceat(w, start[has])
        comm = np.rint(comm).astype(np.int64)
        out = np.empty((len(m.types), sup.size), dtype=np.int64)
        d_size = self.size[sup] - self.size[sub]
        for t in range(len(m.types)):
            load = self.lat[sup, t] - self.lat[sub, t]
            if not m.host[t]:
                load = load + comm
            bad = ((self.bad[sup, t] - self.bad[sub, t]) > 0) | (load > cutoff) | (d_size > m.cap[t])
            out[t] = np.where(bad, INF, load)
        return out


class _States:
    """Device-count states (how many devices of each type are used so far), mixed radix."""

    def __init__(self, counts: list[int]):
        self.shape = tuple(c + 1 for c in counts)
        self.size = int(np.prod(self.shape))
        self.strides = [int(np.prod(self.shape[t + 1:])) for t in range(len(counts))]
        digits = np.array(np.unravel_index(np.arange(self.size), self.shape)).T
        self.has = [np.flatnonzero(digits[:, t] > 0) for t in range(len(counts))]
        self.prev = [h - self.strides[t] for t, h in enumerate(self.has)]


def _dp(tab: _Tables, st: _States, cutoff: int, chunk: int = 1 << 20):
    """The paper's DP restricted to stage loads <= cutoff, one level of ideals (all of one
    size) at a time: a level's candidate pairs come from the previous level's lists (J is a
    proper sub-ideal of I iff J is, or lies inside, an immediate sub-ideal of I), kept only
    within ``cutoff`` compute time and reachable. Returns (dp table (ideals, states), reach)."""
    # long: one loop over levels, each step a handful of whole-level array operations
    lat = tab.m.lat
    n_ideals = tab.ell.size
    # values are <= cutoff or "unreachable": 32 bits suffice below 2**31 ticks (2.1 s)
    dtype = np.int32 if cutoff < np.iinfo(np.int32).max - 1 else np.int64
    big = np.iinfo(dtype).max
    dp = np.full((n_ideals, st.size), big, dtype=dtype)
    dp[0] = 0
    reach = np.zeros(n_ideals, dtype=bool)
    reach[0] = True
    ntypes = len(st.has)
    # per ideal of the previous level, as bits over all ideals: its reachable proper
    # sub-ideals within the cutoff
    nw = -(-n_ideals // 64)
    prev_bits = np.zeros((1, nw), dtype=np.uint64)
    up = lat.up[np.argsort(lat.up[:, 0], kind="stable")]
    up_ptr = np.searchsorted(up[:, 0], lat.level)
    one = np.uint64(1)
    for s in range(1, lat.level.size - 1):
        lo, hi = int(lat.level[s]), int(lat.level[s + 1])
        plo = int(lat.level[s - 1])
        ups = up[up_ptr[s]:up_ptr[s + 1]]
        bits = prev_bits[ups[:, 1] - plo]
        par = ups[:, 1]
        ok = reach[par]
        bits[np.flatnonzero(ok), par[ok] // 64] |= np.left_shift(one, (par[ok] % 64).astype(np.uint64))
        heads = np.flatnonzero(np.concatenate([[True], ups[1:, 0] != ups[:-1, 0]]))
        bits = np.bitwise_or.reduceat(bits, heads, axis=0)
        used = np.flatnonzero(bits.any(axis=0))  # only the words some row uses
        w0, w1 = (int(used[0]), int(used[-1]) + 1) if used.size else (0, 0)
        inside = np.unpackbits(bits[:, w0:w1].view(np.uint8), axis=1, bitorder="little").view(bool)
        inside &= tab.ell_pad[None, w0 * 64:w1 * 64] >= tab.ell[lo:hi, None] - cutoff
        sup, sub = np.nonzero(inside)
        sup = sup + lo
        sub = sub + w0 * 64
        vals = np.full((hi - lo, st.size), big, dtype=dtype)
        for a in range(0, sup.size, chunk):
            sup_c, sub_c = sup[a:a + chunk], sub[a:a + chunk]
            loads = np.minimum(tab.pair_loads(sup_c, sub_c, cutoff), big).astype(dtype)
            rows_j = dp[sub_c]
            heads = np.flatnonzero(np.concatenate([[True], sup_c[1:] != sup_c[:-1]]))  # pairs are sorted by sup
            rows = (sup_c[heads] - lo)[:, None]
            for t in range(ntypes):
                cand = np.take(rows_j, st.prev[t], axis=1)
                np.maximum(cand, loads[t][:, None], out=cand)
                best = np.minimum.reduceat(cand, heads, axis=0)
                cols = st.has[t][None, :]
                vals[rows, cols] = np.minimum(vals[rows, cols], best)
        col = vals.reshape((hi - lo,) + st.shape)
        for ax in range(1, ntypes + 1):
            np.minimum.accumulate(col, axis=ax, out=col)
        dp[lo:hi] = col.reshape(hi - lo, st.size)
        reach[lo:hi] = dp[lo:hi].min(axis=1) <= cutoff
        prev_bits = np.zeros((hi - lo, nw), dtype=np.uint64)
        prev_bits[:, w0:w1] = np.packbits(inside, axis=1, bitorder="little").view(np.uint64)
    dp = dp.astype(np.int64)
    dp[dp == big] = INF
    return dp, reach


def _backtrack(tab: _Tables, st: _States, dp, reach, cutoff: int) -> list:
    """[(type, classes of the stage)] from the first stage to the last."""
    s, i = st.size - 1, tab.ell.size - 1
    stages = []
    member = tab.m.lat.member
    while i != 0:
        v = dp[i, s]
        digits = np.unravel_index(s, st.shape)
        empty = [t for t, stride in enumerate(st.strides) if digits[t] > 0 and dp[i, s - stride] == v]
        if empty:
            s -= st.strides[empty[0]]
            continue
        cand = tab.candidates(i, cutoff, reach)
        loads = tab.pair_loads(np.full(cand.size, i), cand, cutoff)
        for t, stride in enumerate(st.strides):
            if digits[t] == 0:
                continue
            hit = np.flatnonzero(np.maximum(dp[cand, s - stride], loads[t]) == v)
            if hit.size:
                j = int(cand[hit[0]])
                stages.append((t, np.flatnonzero(member[i] & ~member[j])))
                s, i = s - stride, j
                break
        else:  # pragma: no cover - the DP table always has a witness
            raise RuntimeError("pipeline DP: no witness for a table entry")
    return stages[::-1]


def _chain_bound(tab: _Tables, st: _States) -> int:
    """An upper bound: the same DP over the prefixes of one topological order of the
    lattice nodes (a chain of ideals, so any split of it is a placement of the model).
    A DP pass with this cutoff then finds the optimum in one go."""
    lat = tab.m.lat
    index = {row.tobytes(): i for i, row in enumerate(tab.words)}
    indeg = np.bincount(lat.edges[:, 1], minlength=lat.c) if lat.edges.size else np.zeros(lat.c, dtype=np.int64)
    succ: list[list] = [[] for _ in range(lat.c)]
    for a, b in lat.edges.tolist():
        succ[a].append(b)
    import heapq

    heap = [v for v in range(lat.c) if indeg[v] == 0]
    heapq.heapify(heap)
    inside = np.zeros(lat.c, dtype=bool)
    chain = [0]
    while heap:
        v = heapq.heappop(heap)
        inside[v] = True
        row = np.zeros(tab.words.shape[1] * 64, dtype=bool)
        row[:lat.c] = inside
        chain.append(index[np.packbits(row).view(np.uint64).tobytes()])
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    chain = np.array(chain, dtype=np.int64)
    hi_i, lo_i = np.tril_indices(chain.size, -1)  # every (later prefix, earlier prefix) pair
    loads = tab.pair_loads(chain[hi_i], chain[lo_i], INF // 2)
    start = np.concatenate([[0], np.cumsum(np.arange(chain.size))])
    dp = np.full((chain.size, st.size), INF, dtype=np.int64)
    dp[0] = 0
    for i in range(1, chain.size):
        rows = slice(int(start[i]), int(start[i + 1]))
        vals = np.full(st.size, INF, dtype=np.int64)
        for t in range(len(st.has)):
            best = np.maximum(dp[:i][:, st.prev[t]], loads[t, rows][:, None]).min(axis=0)
            vals[st.has[t]] = np.minimum(vals[st.has[t]], best)
        col = vals.reshape(st.shape)
        for ax in range(len(st.has)):
            np.minimum.accumulate(col, axis=ax, out=col)
        dp[i] = col.ravel()
    return int(dp[-1, -1])


def trivial_bound(g: Graph) -> int:
    """No placement beats the heaviest op at its cheapest, nor the total work spread evenly."""
    cheapest = np.where(g.allowed, g.unary, INF).min(axis=1) if g.n else np.zeros(0, dtype=np.int64)
    return int(max(cheapest.max(initial=0), -(-int(cheapest.sum()) // max(g.k, 1))))


def solve_ideals(g: Graph, max_ideals: int = MAX_IDEALS) -> Solution | None:
    """The exact optimum in the model above, or None when the DAG has more than
    ``max_ideals`` ideals (the caller then falls back to splits of one topological order)."""
    t0 = time.perf_counter()
    m = _build(g)
    if not enumerate_ideals(m.lat, max_ideals):
        return None
    tab = _Tables(m)
    st = _States([len(t) for t in m.types])
    total = int(tab.ell[-1])
    k = sum(len(t) for t in m.types)
    cutoff = max(int(m.ell.max()) if m.ell.size else 0, -(-total // max(k, 1)), 1)
    bound = _chain_bound(tab, st)
    if bound < INF:
        cutoff = max(cutoff, bound)
    tries = 0
    while True:
        tries += 1
        dp, reach = _dp(tab, st, cutoff)
        best = int(dp[-1, -1])
        if best <= cutoff:
            break
        if cutoff >= INF // 2:
            raise ValueError("no contiguous split into one stage per device respects the pinned ops and memory caps "
                             "(e.g. explicit device_puts alternating between devices); try --retarget-puts or "
                             "another objective")
        cutoff = min(INF // 2, int(cutoff * 1.25) + 1)
    stages = _backtrack(tab, st, dp, reach, cutoff)
    cls_dev = np.zeros(m.lat.c, dtype=np.int64)
    used = [0] * len(m.types)
    names = []
    for t, classes in stages:
        dev = m.types[t][used[t]]
        used[t] += 1
        cls_dev[classes] = dev
        names.append(f"{g.devices[dev]}: {classes.size} class(es)")
    assign = cls_dev[m.lat.cls]
    notes = list(m.lat.notes or []) + [
        f"{m.lat.c} classes, {tab.ell.size} ideals; load cutoff reached after {tries} DP pass(es)",
        "stages: " + ", ".join(names)]
    return Solution(assign, best, "ideal-dp", best, True, time.perf_counter() - t0, notes, MODEL)

