"""Make the problem smaller before solving, and map the answer back.

Two kinds of coarsening, kept apart because only one of them is free:

- ``contract`` merges groups of nodes that must share a device anyway (colour classes,
  a multilevel matching). Exact when the grouping is a constraint; a heuristic otherwise.
- ``Reduction`` removes nodes whose best device follows from their neighbours', which keeps
  the optimum exactly (valid without load/memory caps, for nodes that may run anywhere at
  the same compute cost). The rule (Padberg & Rinaldi's test for minimum cuts, which holds
  for any number of devices): if one edge v-x carries at least half of v's edge weight,
  some optimal placement puts v next to x — moving v there gains ``w(v, x)`` and loses at
  most the rest. So v is merged into x. It covers leaves (data sources, results), every
  link of a chain (a chain collapses to its cheapest link).
  Eager programs are long chains and trees of small ops, so this usually leaves only the
  pinned nodes and the few real junctions for the solver.
"""
from __future__ import annotations

import numpy as np

from jaxplace_cli.suggest.model import Partition, merge_edges


def contract(p: Partition, groups: np.ndarray) -> Partition:
    """Merge nodes with equal ``groups`` label (0..c-1): costs, loads and memory add up,
    allowed devices intersect, edges between groups add up, edges inside vanish."""
    groups = np.asarray(groups, dtype=np.int64)
    c = int(groups.max()) + 1 if groups.size else 0
    unary = np.zeros((c, p.k), dtype=np.int64)
    np.add.at(unary, groups, p.unary)
    allowed = np.ones((c, p.k), dtype=bool)
    np.logical_and.at(allowed, groups, p.allowed)
    if c and not allowed.any(axis=1).all():
        bad = int(np.flatnonzero(~allowed.any(axis=1))[0])
        raise ValueError(f"merged group {bad} has no device all its members may use")
    load = np.bincount(groups, weights=p.load, minlength=c).astype(np.int64)
    mem = np.bincount(groups, weights=p.mem, minlength=c).astype(np.int64)
    u, v, w = merge_edges(groups[p.u], groups[p.v], p.w, max(c, 1))
    return Partition(p.k, u, v, w, unary, allowed, load, mem, p.load_cap, p.mem_cap, p.offset)


def color_groups(color: np.ndarray) -> np.ndarray:
    """Group labels from colour classes: nodes of one colour share a group; others alone."""
    color = np.asarray(color, dtype=np.int64)
    n = color.size
    key = np.where(color >= 0, color, -1 - np.arange(n))  # uncoloured: unique keys
    _, first, groups = np.unique(key, return_index=True, return_inverse=True)
    # number groups in order of their first node, so coarse order follows the fine order
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[groups].astype(np.int64)


class Reduction:
    """Exact merging of uncapped partition problems (see the module docstring).

    Works in vectorised rounds: each round merges an *independent* set of eligible nodes
    (no two adjacent), so every merge sees exactly the edges its test was made on and all
    merges of a round are valid together. Rounds stop when they no longer shrink the graph
    by 1%. ``reduced``: the smaller problem; ``expand(labels)``: labels for every node.
    """

    def __init__(self, p: Partition, max_rounds: int = 64):
        if p.constrained:
            raise ValueError("exact reductions need a problem without load/memory caps")
        self.n = p.n
        groups = np.arange(p.n, dtype=np.int64)
        reducible = p.allowed.all(axis=1) & (p.unary == p.unary[:, :1]).all(axis=1)
        prio = np.random.default_rng(0).permutation(max(p.n, 1)).astype(np.int64)
        cur = p
        self.rounds = 0
        for _ in range(max_rounds):
            step = _absorb_round(cur, reducible, prio[:cur.n])
            if step is None:
                break
            coarse, merged = step
            cur = contract(cur, coarse)
            # a group's representative: its member that was not merged away
            rep = np.full(cur.n, -1, dtype=np.int64)
            alive = np.flatnonzero(~merged)
            rep[coarse[alive]] = alive
            reducible = reducible[rep]
            prio = prio[rep]
            groups = coarse[groups]
            self.rounds += 1
            if merged.sum() < 0.01 * merged.size:
                break
        self.groups = groups
        self.reduced = cur

    def expand(self, labels: np.ndarray) -> np.ndarray:
        return np.asarray(labels, dtype=np.int64)[self.groups]


def _absorb_round(p: Partition, reducible: np.ndarray, prio: np.ndarray):
    """One round: every eligible node of an independent set is merged into the neighbour
    holding at least half of its edge weight. Returns (group labels, merged mask) or None."""
    n = p.n
    if n == 0 or p.u.size == 0:
        return None
    heads = np.concatenate([p.u, p.v])
    tails = np.concatenate([p.v, p.u])
    ws = np.concatenate([p.w, p.w])
    deg = np.bincount(heads, weights=ws, minlength=n)
    # heaviest neighbour per node (ties: lowest id)
    order = np.lexsort((tails, -ws, heads))
    first = np.ones(order.size, dtype=bool)
    first[1:] = heads[order][1:] != heads[order][:-1]
    pick = order[first]
    target = np.full(n, -1, dtype=np.int64)
    heavy = np.zeros(n)
    target[heads[pick]] = tails[pick]
    heavy[heads[pick]] = ws[pick]
    eligible = reducible & (target >= 0) & (2 * heavy >= deg)
    if not eligible.any():
        return None
    # independent set: eligible nodes whose priority beats every eligible neighbour's
    best_nbr = np.full(n, -1, dtype=np.int64)
    e = eligible[tails]
    np.maximum.at(best_nbr, heads[e], prio[tails[e]])
    chosen = eligible & (prio > best_nbr)
    # targets are neighbours of chosen nodes, hence never chosen: they survive the round
    groups = np.arange(n, dtype=np.int64)
    groups[chosen] = target[chosen]
    _, coarse = np.unique(groups, return_inverse=True)
    return coarse.astype(np.int64), chosen
