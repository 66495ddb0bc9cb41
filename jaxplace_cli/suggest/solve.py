"""Pick the right solver for a partition problem, run it, and say how good the answer is.

=====================================  =======================================  ==========
problem (after exact reductions)       solver                                   guarantee
=====================================  =======================================  ==========
2 devices, no caps                     s-t minimum cut (mincut.py)              optimal
<= ``exact_limit`` nodes, <= 4 devices integer program (milp.py)                optimal*
more devices, no caps                  expansion moves (mincut.py)              <= 2 x opt
caps (``--balance``, memory)           multilevel search (multilevel.py)        heuristic
=====================================  =======================================  ==========

(*) within HiGHS's deterministic node limit; otherwise its dual bound is reported.
Afterwards every node that could sit on its ``hint`` device (where it ran) at no extra
cost is put back there, so a suggestion only moves what it must.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from jaxplace_cli.suggest.coarsen import Reduction
from jaxplace_cli.suggest.milp import MilpFailed, solve_milp
from jaxplace_cli.suggest.mincut import expansion, two_devices
from jaxplace_cli.suggest.model import Partition, Solution, cost, feasible
from jaxplace_cli.suggest.multilevel import multilevel, refine

SOLVERS = ("auto", "mincut", "milp", "expansion", "multilevel")


def solve_partition(p: Partition, hint: np.ndarray | None = None, seed: int = 0,
                    solver: str = "auto", exact_limit: int = 200,
                    node_limit: int = 1500) -> Solution:
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, not {solver!r}")
    t0 = time.perf_counter()
    notes = []
    red = None
    q = p
    if not p.constrained and solver != "multilevel":
        red = Reduction(p)
        q = red.reduced
        notes.append(f"exact reductions: {p.n} -> {q.n} nodes")
    choice = solver
    if choice == "auto":
        if q.k == 2 and not q.constrained:
            choice = "mincut"
        elif q.n <= exact_limit and q.k <= 4:
            choice = "milp"
        elif not q.constrained:
            choice = "expansion"
        else:
            choice = "multilevel"
    init = _project_hint(hint, red, q)
    if choice == "mincut":
        sol = two_devices(q)
    elif choice == "milp":
        try:
            # The node limit, not the clock, bounds the search: a time limit would make the
            # answer depend on the machine's load (same input + seed = same policy file).
            # 1,500 nodes is ~30 s on the hardest 200-node, 4-device capped instances here.
            sol = solve_milp(q, node_limit=node_limit, time_limit=3600.0)
        except MilpFailed as exc:
            notes.append(f"{exc}; fell back to the multilevel search")
            sol = multilevel(q, seed)
    elif choice == "expansion":
        sol = expansion(q, init)
    else:
        sol = multilevel(q, seed)
    if q.constrained and q.k == 2 and solver in ("auto", "multilevel") and not sol.optimal:
        sol = _best(q, sol, _repaired_unconstrained(q, seed, init))
    labels = _settle_isolated(q, np.asarray(sol.assign, dtype=np.int64), init)
    labels = red.expand(labels) if red is not None else labels
    if hint is not None:
        labels = prefer(p, labels, hint)
    value = cost(p, labels)  # reductions are exact and ``prefer`` never adds cost: value <= sol.cost
    return Solution(labels, value, sol.solver, sol.lower_bound, sol.optimal,
                    time.perf_counter() - t0, notes + sol.notes)


def _repaired_unconstrained(q: Partition, seed: int, init) -> Solution:
    """Two devices, the caps' other route: solve without them (exact), keep the answer
    when it meets the caps — then it is optimal, as the caps can only raise the optimum —
    else repair it by refinement moves off the over-full devices. Multilevel search alone
    can land far from the optimum on graphs whose best cut is unbalanced but feasible."""
    t0 = time.perf_counter()
    free = replace(q, load_cap=None, mem_cap=None)
    base = two_devices(free)
    labels = np.asarray(base.assign, dtype=np.int64)
    bound = base.cost if base.optimal else base.lower_bound
    if feasible(q, labels):
        return Solution(labels, cost(q, labels), f"{base.solver} (the caps hold)", bound,
                        base.optimal, time.perf_counter() - t0)
    rng = np.random.default_rng(seed)
    best = refine(q, labels, rng, 16)
    name = f"{base.solver} + repair"
    if q.k == 2 and q.mem_cap is None and q.load_cap is not None:
        anchored, start = _anchored(free, labels)
        cuts = {c.tobytes(): c for c in _penalised_cuts(q, anchored, start)}.values()
        load = q.load.astype(np.float64)

        def overload(c):
            return max(0.0, float(np.bincount(c, weights=load, minlength=2).max()) - q.load_cap)

        nearest = min((c for c in cuts if overload(c) > 0), key=overload, default=None)
        tried = [c for c in cuts if overload(c) == 0]
        if nearest is not None:  # the cut just over the cap, repaired
            tried.append(_cheapest_moves(q, nearest))
        for cand in tried:
            cand = refine(q, cand, rng, 16)
            if (not feasible(q, cand), cost(q, cand)) < (not feasible(q, best), cost(q, best)):
                best, name = cand, "min-cut with a load penalty"
    return Solution(best, cost(q, best), name, bound, False, time.perf_counter() - t0)


def _anchored(free: Partition, labels: np.ndarray):
    """A load price on one device alone is dodged by moving *everything* to the other one
    (free when nothing is pinned). Anchor the first node (a source of the dataflow) on device
    0 and the last (a sink) on device 1 unless pins already hold both sides."""
    a0, a1 = free.allowed[:, 0], free.allowed[:, 1]
    if (a0 & ~a1).any() and (a1 & ~a0).any():
        return free, labels
    first = np.flatnonzero(a0)
    last = np.flatnonzero(a1)
    if first.size == 0 or last.size == 0 or first[0] == last[-1]:
        return free, labels
    allowed = free.allowed.copy()
    allowed[first[0]] = (True, False)
    allowed[last[-1]] = (False, True)
    anchored = replace(free, allowed=allowed)
    return anchored, np.asarray(two_devices(anchored).assign, dtype=np.int64)


def _cheapest_moves(q: Partition, labels: np.ndarray, max_moves: int = 2000) -> np.ndarray:
    """Two devices over a load cap: move, one at a time, the node whose move costs least per
    unit of load it takes off the over-full device, until the cap holds. The repair a cut
    just over the cap needs (a penalised cut jumps in steps; the last step before the cap
    is usually a few nodes too heavy)."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    if q.n > 20_000:
        return labels
    load = q.load.astype(np.float64)
    for _ in range(max_moves):
        loads = np.bincount(labels, weights=load, minlength=2)
        if loads.max() <= q.load_cap:
            break
        d = int(loads.argmax())
        o = 1 - d
        conn = np.zeros((q.n, 2), dtype=np.float64)
        np.add.at(conn, (q.u, labels[q.v]), q.w)
        np.add.at(conn, (q.v, labels[q.u]), q.w)
        delta = q.unary[:, o] - q.unary[:, d] + conn[:, d] - conn[:, o]
        cand = (labels == d) & q.allowed[:, o] & (load > 0) & (loads[o] + load <= q.load_cap)
        if not cand.any():
            break
        labels[int(np.argmin(np.where(cand, delta / np.where(load > 0, load, 1), np.inf)))] = o
    return labels


def _penalised_cuts(q: Partition, free: Partition, start: np.ndarray, steps: int = 24):
    """Two devices under a load cap, the Lagrangian way: charge every unit of load placed on
    the over-full device a price ``lam`` and solve the (still exact) minimum cut; bisect on
    ``lam`` for the cheapest price at which that device meets the cap. Yields each cut
    tried. Min cuts under a growing price are nested, so the search is monotone."""
    load = q.load.astype(np.float64)
    heavy = int(np.bincount(start, weights=load, minlength=2).argmax())
    positive = load[load > 0]
    if positive.size == 0:
        return
    lo, hi = 0.0, float(int(q.w.sum()) + int(np.abs(q.unary).sum()) + 1) / float(positive.min())
    if q.n > 20_000:
        return  # each cut is a max-flow over the whole graph: too slow to repeat at this size
    for _ in range(steps):
        lam = (lo + hi) / 2 if hi / max(lo, 1e-300) < 4 else (lo * hi) ** 0.5 if lo > 0 else hi / 1024
        unary = q.unary.copy()
        unary[:, heavy] += np.rint(lam * load).astype(np.int64)
        labels = np.asarray(two_devices(replace(free, unary=unary)).assign, dtype=np.int64)
        yield labels
        if np.bincount(labels, weights=load, minlength=2)[heavy] <= q.load_cap:
            hi = lam
        else:
            lo = lam


def _best(q: Partition, a: Solution, b: Solution) -> Solution:
    """The better of two answers: feasible first, then cost; the best lower bound is kept."""
    key = lambda s: (not feasible(q, s.assign), s.cost)  # noqa: E731
    win, other = (a, b) if key(a) <= key(b) else (b, a)
    bounds = [x for x in (a.lower_bound, b.lower_bound) if x is not None]
    bound = max(bounds) if bounds else None
    optimal = win.optimal or (bound is not None and feasible(q, win.assign) and bound >= win.cost)
    notes = list(win.notes) + [f"also tried {other.solver} (cost {other.cost})"]
    return Solution(win.assign, win.cost, win.solver, bound, optimal,
                    a.seconds + b.seconds, notes)


def _project_hint(hint, red, q: Partition):
    """A starting placement for the reduced problem: the device most of a merged node's
    members ran on (ties: the lower device)."""
    if hint is None:
        return None
    hint = np.asarray(hint, dtype=np.int64)
    groups = red.groups if red is not None else np.arange(hint.size)
    votes = np.zeros((q.n, q.k), dtype=np.int64)
    ok = hint >= 0
    np.add.at(votes, (groups[ok], hint[ok]), 1)
    votes[~q.allowed] = -1
    start = votes.argmax(axis=1)
    fallback = np.where(q.allowed, q.unary, np.iinfo(np.int64).max // 4).argmin(axis=1)
    return np.where(votes.max(axis=1) > 0, start, fallback).astype(np.int64)


def _settle_isolated(q: Partition, labels: np.ndarray, start) -> np.ndarray:
    """Nodes left without edges cost the same on every device of equal compute cost: put
    them where most of their members ran."""
    if start is None or q.constrained:
        return labels
    deg = np.bincount(np.concatenate([q.u, q.v]), minlength=q.n)[:q.n] if q.u.size else np.zeros(q.n, dtype=np.int64)
    rows = np.arange(q.n)
    same = q.unary[rows, start] <= q.unary[rows, labels]
    move = (deg == 0) & same & q.allowed[rows, start]
    out = labels.copy()
    out[move] = start[move]
    return out


def prefer(p: Partition, labels: np.ndarray, hint: np.ndarray, rounds: int = 8) -> np.ndarray:
    """Move nodes to their ``hint`` device where that costs nothing (or saves).

    Moves are made in rounds of non-adjacent nodes, so the cost changes of one round add up
    exactly and the total never increases. Skipped under caps (a free move could break one).
    """
    if p.constrained:
        return labels
    labels = np.asarray(labels, dtype=np.int64).copy()
    hint = np.asarray(hint, dtype=np.int64)
    n, k = p.n, p.k
    rows = np.arange(n)
    heads = np.concatenate([p.u, p.v])
    tails = np.concatenate([p.v, p.u])
    ws = np.concatenate([p.w, p.w])
    h = np.clip(hint, 0, k - 1)
    for _ in range(rounds):
        cand = (hint >= 0) & (labels != hint) & p.allowed[rows, h]
        if not cand.any():
            break
        conn = np.zeros((n, k), dtype=np.int64)
        np.add.at(conn, (heads, labels[tails]), ws)
        delta = p.unary[rows, h] - p.unary[rows, labels] + conn[rows, labels] - conn[rows, h]
        cand &= delta <= 0
        if not cand.any():
            break
        # independent set: a candidate moves unless a lower-numbered neighbour also would
        blocked = np.zeros(n, dtype=bool)
        both = cand[heads] & cand[tails] & (tails < heads)
        blocked[heads[both]] = True
        move = cand & ~blocked
        labels[move] = hint[move]
    return labels


def solve_graph(g, objective: str, seed: int = 0, balance: float | None = None,
                solver: str = "auto", hint: np.ndarray | None = None) -> Solution:
    """Any objective on a ``Graph``: colour classes are merged first (an exact constraint),
    the answer is mapped back to every node."""
    from jaxplace_cli.suggest.coarsen import color_groups, contract
    from jaxplace_cli.suggest.model import MAKESPAN, THROUGHPUT, partition_problem
    from jaxplace_cli.suggest.schedule import solve_makespan

    if objective == MAKESPAN:
        return solve_makespan(g)
    if objective == THROUGHPUT:
        return solve_stages(g)
    p = partition_problem(g, objective, balance)
    if (g.color >= 0).any():
        groups = color_groups(g.color)
        q = contract(p, groups)
        qhint = None
        if hint is not None:
            qhint = np.full(q.n, -1, dtype=np.int64)
            qhint[groups[::-1]] = np.asarray(hint)[::-1]
        sol = solve_partition(q, qhint, seed, solver)
        sol.assign = sol.assign[groups]
        sol.notes.insert(0, f"colour classes: {p.n} -> {q.n} nodes")
        return sol
    return solve_partition(p, hint, seed, solver)


def solve_stages(g, max_ideals: int | None = None) -> Solution:
    """``throughput``: the exact optimum over contiguous stages (ideals, stages.py); when the
    DAG has too many ideals, the best split of one topological order, which is not claimed
    optimal in that model (its lower bound is the trivial one)."""
    from jaxplace_cli.suggest.ideals import stage_loads
    from jaxplace_cli.suggest.pipeline import solve_throughput
    from jaxplace_cli.suggest.stages import MODEL, solve_ideals, trivial_bound

    sol = solve_ideals(g) if max_ideals is None else solve_ideals(g, max_ideals)
    if sol is not None:
        return sol
    t0 = time.perf_counter()
    order = solve_throughput(g)
    value = int(stage_loads(g, order.assign).max())
    return Solution(order.assign, value, "pipeline-dp (one topological order)", trivial_bound(g), False,
                    time.perf_counter() - t0 + order.seconds,
                    ["too many ideals for the exact DP: best split of the dispatch order instead"] + order.notes,
                    MODEL)
