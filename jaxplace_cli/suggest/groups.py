"""Placements a policy file can say in few rules: each (site, op name) group as a whole.

A solver places nodes, but a rules file addresses *groups* — the calls of one op name at one
``file:line`` in one function (``RunGraph.groups``). A placement that sends a group's calls
to different devices could only be written with one ``occurrence`` rule per call (75 rules
for an ADVI loop; one per step of a training loop, and wrong for a run with more steps). So:

- a group whose calls each sit where all their array inputs are is written as one rule with
  ``device = "jax"`` (JAX runs an op where its data is): by-hand data parallelism over
  devices the script committed its data to stays exact in one rule;
- any other group split over devices is *tied* (a colour class: one device) and the problem
  solved again, until no such group is left (the last of ``MAX_ROUNDS`` ties every group at
  once). Ties only ever grow, so this ends; a tie that would join two different pins (data the
  script put on different devices) is left out, and such a group keeps occurrence rules — the
  one case where they are needed.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from jaxplace_cli.suggest.model import Graph, Solution

MAX_ROUNDS = 6


def follows_data(g: Graph, assign: np.ndarray) -> np.ndarray:
    """Per node: it reads at least one array and every one of them is on its own device."""
    a = np.asarray(assign, dtype=np.int64)
    has_input = np.zeros(g.n, dtype=bool)
    has_input[g.dst] = True
    away = np.zeros(g.n, dtype=bool)
    away[g.dst[a[g.src] != a[g.dst]]] = True
    return has_input & ~away


def split_groups(group: np.ndarray, assign: np.ndarray) -> np.ndarray:
    """Ids of groups whose calls are on more than one device."""
    m = group >= 0
    pairs = np.unique(np.stack([group[m], np.asarray(assign)[m]], axis=1), axis=0)
    ids, count = np.unique(pairs[:, 0], return_counts=True) if pairs.size else (np.zeros(0, np.int64), [])
    return ids[np.asarray(count) > 1]


def tie(g: Graph, group: np.ndarray, tied) -> tuple[np.ndarray, int]:
    """The graph's colour classes with every group in ``tied`` joined into one, and how many
    calls could not join because their class is pinned elsewhere."""
    n = g.n
    parent = np.arange(n)

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    allowed = g.allowed.copy()
    first: dict = {}
    for v in range(n):  # the existing classes
        c = int(g.color[v])
        if c >= 0:
            if c in first:
                r, s = find(first[c]), find(v)
                if r != s:
                    parent[s] = r
                    allowed[r] &= allowed[s]
            else:
                first[c] = v
    left_out = 0
    tied = set(int(t) for t in tied)
    anchor: dict = {}
    for v in range(n):
        gid = int(group[v])
        if gid not in tied:
            continue
        if gid not in anchor:
            anchor[gid] = v
            continue
        r, s = find(anchor[gid]), find(v)
        if r == s:
            continue
        both = allowed[r] & allowed[s]
        if not both.any():
            left_out += 1
            continue
        parent[s] = r
        allowed[r] = both
    roots = np.array([find(v) for v in range(n)], dtype=np.int64)
    size = np.bincount(roots, minlength=n)
    return np.where(size[roots] > 1, roots, -1), left_out


def solve_by_group(g: Graph, group: np.ndarray, solve) -> tuple[Solution, np.ndarray]:
    """``solve(graph) -> Solution`` until every split group follows its data (module
    docstring). Returns the solution (on ``g``'s nodes) and the mask of nodes that a rule
    leaves to JAX (``device = "jax"``)."""
    sol = solve(g)
    tied: set = set()
    for rnd in range(MAX_ROUNDS):
        bad, _ = _split_by_following(g, group, sol.assign)
        new = set(bad.tolist()) - tied
        if not new:
            break
        if rnd == MAX_ROUNDS - 1:
            # The last round ties every group of two calls or more at once, so its answer
            # splits none (pins aside): one new split group a round could otherwise outlast
            # the rounds and leave occurrence rules (a balanced kernel_ridge answer did, its
            # op times measured under load).
            ids, count = np.unique(group[group >= 0], return_counts=True)
            new = set(ids[count > 1].tolist()) - tied
        tied |= new
        color, left_out = tie(g, group, tied)
        sol = solve(replace(g, color=color))
        sol.model = "; ".join(x for x in (sol.model, "the calls of a site/op group share one device") if x)
        sol.notes.insert(0, f"{len(tied)} site/op group(s) kept on one device each, so the policy needs no "
                            f"per-call rules" + (f" ({left_out} call(s) pinned elsewhere stay apart)" if left_out else ""))
    return sol, follow_mask(g, group, sol.assign)


def follow_mask(g: Graph, group: np.ndarray, assign) -> np.ndarray:
    """The nodes a rule leaves to JAX (``device = "jax"``): split groups whose calls all follow
    their data."""
    _, following = _split_by_following(g, group, assign)
    return np.isin(group, following) & (group >= 0)


def _split_by_following(g: Graph, group: np.ndarray, assign) -> tuple[np.ndarray, np.ndarray]:
    """Split groups with a call away from its data, and split groups whose calls all follow
    it (one pass over the nodes: a run has up to millions of ops and thousands of groups)."""
    split = split_groups(group, assign)
    if not split.size:
        return split, split
    m = group >= 0
    away = np.bincount(group[m & ~follows_data(g, assign)], minlength=int(group.max()) + 1)
    return split[away[split] > 0], split[away[split] == 0]
