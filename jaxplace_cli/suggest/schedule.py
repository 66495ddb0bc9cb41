"""``makespan``: list scheduling in the HEFT family, then local search.

Model: each device runs its ops one at a time in a fixed priority order; an op starts when
its device is free and every input has arrived; an input produced on another device arrives
``comm[e]`` after its producer finished (links are not modelled as contended). Memory caps
are respected by never choosing a device whose cap the op's memory would exceed.

HEFT (Topcuoglu, Hariri & Wu 2002) orders ops by *upward rank* (average compute plus the
longest average path to the end) and gives each, in turn, the device where it finishes
earliest (appending, without insertion into idle gaps). Local search then tries moving ops
on the critical path to other devices, keeping moves that shorten the simulated run. The
answer is the best of: every single-device placement, plain HEFT, and both improved by
local search — so it is never worse than the best single device or plain HEFT, by
construction. The search is bounded by a count of simulations, not by the clock, so it is
deterministic. Colour classes (nodes that must share a device) are placed as one: HEFT
places a class where its first-ranked member finishes earliest, and a local-search move
moves the whole class.
"""
from __future__ import annotations

import time

import numpy as np

from jaxplace_cli.suggest.model import Graph, Solution

INF = float("inf")


class Schedule:
    """Precomputed predecessor lists and the priority order for one graph."""

    def __init__(self, g: Graph):
        self.g = g
        n, k = g.n, g.k
        self.n, self.k = n, k
        preds: list[list] = [[] for _ in range(n)]
        succs: list[list] = [[] for _ in range(n)]
        for s, d, c in zip(g.src.tolist(), g.dst.tolist(), g.comm.tolist()):
            if s == d:
                continue
            preds[d].append((s, c))
            succs[s].append((d, c))
        self.preds, self.succs = preds, succs
        self.unary = g.unary.tolist()
        members: dict = {}  # colour -> its nodes
        for v in np.flatnonzero(g.color >= 0).tolist():
            members.setdefault(int(g.color[v]), []).append(v)
        self.group = {vs[0]: vs for vs in members.values()}  # a class's first node -> its nodes
        self.cls = list(range(n))  # per node, its class's first node
        allowed = g.allowed.copy()
        for first, vs in self.group.items():
            both = np.logical_and.reduce(allowed[vs], axis=0)
            allowed[vs] = both if both.any() else allowed[vs]
            for v in vs:
                self.cls[v] = first
        self.allowed = allowed.tolist()
        self.mem = g.mem.tolist()
        self.mem_cap = None if g.mem_cap is None else np.broadcast_to(np.asarray(g.mem_cap), (k,)).tolist()
        self.order = self._rank_order()

    def _rank_order(self) -> list[int]:
        n, k = self.n, self.k
        avg = []
        for v in range(n):
            vals = [self.unary[v][d] for d in range(k) if self.allowed[v][d]]
            avg.append(sum(vals) / len(vals) if vals else 0.0)
        frac = (k - 1) / k if k > 1 else 0.0
        rank = [0.0] * n
        for v in range(n - 1, -1, -1):  # node order is topological
            best = 0.0
            for d, c in self.succs[v]:
                best = max(best, c * frac + rank[d])
            rank[v] = avg[v] + best
        return sorted(range(n), key=lambda v: (-rank[v], v))

    def simulate(self, assign) -> tuple[float, list]:
        """Makespan of ``assign`` under the priority order, and each op's finish time."""
        finish = [0.0] * self.n
        free = [0.0] * self.k
        a = assign
        for v in self.order:
            d = a[v]
            start = free[d]
            for u, c in self.preds[v]:
                t = finish[u] + (c if a[u] != d else 0)
                if t > start:
                    start = t
            finish[v] = start + self.unary[v][d]
            free[d] = finish[v]
        return (max(finish) if finish else 0.0), finish

    def heft(self) -> list[int]:
        finish = [0.0] * self.n
        free = [0.0] * self.k
        used = [0] * self.k
        a = [-1] * self.n
        class_dev: dict = {}
        for v in self.order:
            placed = class_dev.get(self.cls[v], -1)
            opts = [placed] if placed >= 0 else [d for d in range(self.k) if self.allowed[v][d]]
            if self.mem_cap is not None and placed < 0:
                room = [d for d in opts if used[d] + self.mem[v] <= self.mem_cap[d]]
                opts = room or opts
            best, best_t = -1, INF
            for d in opts:
                start = free[d]
                for u, c in self.preds[v]:
                    t = finish[u] + (c if a[u] != d else 0)
                    if t > start:
                        start = t
                t = start + self.unary[v][d]
                if t < best_t:
                    best, best_t = d, t
            a[v] = best
            class_dev[self.cls[v]] = best
            finish[v] = best_t
            free[best] = best_t
            used[best] += self.mem[v]
        return a

    def single(self, d: int) -> list[int] | None:
        """Everything on ``d``; ops that cannot run there go to their cheapest allowed device."""
        out = []
        cheapest: dict = {}
        for v in range(self.n):
            if self.allowed[v][d]:
                out.append(d)
            else:
                c = self.cls[v]
                if c not in cheapest:
                    vs = self.group.get(c, [v])
                    opts = [e for e in range(self.k) if self.allowed[v][e]]
                    cheapest[c] = min(opts, key=lambda e: (sum(self.unary[w][e] for w in vs), e))
                out.append(cheapest[c])
        return out if self.fits(out) else None

    def fits(self, a) -> bool:
        if self.mem_cap is None:
            return True
        used = [0] * self.k
        for v, d in enumerate(a):
            used[d] += self.mem[v]
        return all(used[d] <= self.mem_cap[d] for d in range(self.k))

    def critical_path(self, a, finish) -> list[int]:
        """Ops on the chain that decides the makespan (walked back from the last finish)."""
        if not self.n:
            return []
        pos = {v: i for i, v in enumerate(self.order)}
        v = max(range(self.n), key=lambda x: (finish[x], -x))
        path = []
        prev_on_dev: dict = {}
        last = {}
        for x in self.order:
            prev_on_dev[x] = last.get(a[x], -1)
            last[a[x]] = x
        while v >= 0:
            path.append(v)
            start = finish[v] - self.unary[v][a[v]]
            nxt = -1
            for u, c in self.preds[v]:
                if finish[u] + (c if a[u] != a[v] else 0) >= start - 1e-9:
                    nxt = u
                    break
            if nxt < 0:
                p = prev_on_dev[v]
                nxt = p if p >= 0 and finish[p] >= start - 1e-9 and pos[p] < pos[v] else -1
            v = nxt
        return path

    def local_search(self, a, budget: int) -> tuple[list[int], float, int]:
        a = list(a)
        best, finish = self.simulate(a)
        used = 0
        improved = True
        while improved and used < budget:
            improved = False
            for v in self.critical_path(a, finish):
                cur = a[v]
                for d in range(self.k):
                    if d == cur or not self.allowed[v][d] or used >= budget:
                        continue
                    vs = self.group.get(self.cls[v], (v,))
                    for w in vs:
                        a[w] = d
                    if not self.fits(a):
                        for w in vs:
                            a[w] = cur
                        continue
                    used += 1
                    t, f = self.simulate(a)
                    if t < best - 1e-9:
                        best, finish, cur = t, f, d
                        improved = True
                        break
                    for w in vs:
                        a[w] = cur
                if improved:
                    break
        return a, best, used

    def lower_bound(self) -> float:
        """max(total cheapest work / devices, longest path of cheapest ops without transfers,
        the cheapest device's work of any colour class: one device runs it all)."""
        cheap = [min((self.unary[v][d] for d in range(self.k) if self.allowed[v][d]), default=0)
                 for v in range(self.n)]
        longest = [0.0] * self.n
        for v in range(self.n):
            start = max((longest[u] for u, _ in self.preds[v]), default=0.0)
            longest[v] = start + cheap[v]
        together = max((min(sum(self.unary[w][d] for w in vs) for d in range(self.k) if self.allowed[vs[0]][d])
                        for vs in self.group.values()), default=0.0)
        return max(sum(cheap) / max(self.k, 1), max(longest, default=0.0), together)


def solve_makespan(g: Graph, budget: int | None = None) -> Solution:
    t0 = time.perf_counter()
    sch = Schedule(g)
    if budget is None:
        budget = max(200, min(4000, 2_000_000 // max(g.n + g.m, 1)))
    cands = []
    for d in range(g.k):
        a = sch.single(d)
        if a is not None:
            cands.append((f"all on {g.devices[d]}", a))
    cands.append(("HEFT", sch.heft()))
    scored = [(sch.simulate(a)[0], name, a) for name, a in cands]
    notes = [f"{name}: {t:.6g}" for t, name, a in scored]
    best_single = min((s for s in scored if s[1] != "HEFT"), default=None, key=lambda s: s[0])
    heft = scored[-1]
    starts = [heft] + ([best_single] if best_single is not None else [])
    spent = 0
    for _t, name, a in starts:
        a2, t2, used = sch.local_search(a, budget - spent)
        spent += used
        scored.append((t2, f"{name} + local search", a2))
    t, name, a = min(scored, key=lambda s: (s[0], s[1]))
    lb = sch.lower_bound()
    notes.append(f"chosen: {name}; {spent} local-search simulations")
    return Solution(np.array(a, dtype=np.int64), int(round(t)), "heft+local-search",
                    int(np.floor(lb)), t <= lb + 1e-9, time.perf_counter() - t0, notes)
