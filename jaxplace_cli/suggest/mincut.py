"""Cut-based partition solvers: exact for two devices, expansion moves for more.

Two devices with a total cost (compute on each device + cost of every edge whose ends are
split) is Stone's two-processor assignment problem: one s-t minimum cut, exact at any size.
With more devices, each *expansion move* ("which nodes switch to device a?") is again one
exact minimum cut (Boykov, Veksler & Zabih 2001); repeating them until no move helps gives a
placement within twice the optimum for this (Potts) cost, and it scales like max-flow.
Neither handles load or memory caps: those go to the integer program or the multilevel
search (solve.py decides).
"""
from __future__ import annotations

import time

import numpy as np

from jaxplace_cli.suggest.graphcut import binary_cut
from jaxplace_cli.suggest.model import Partition, Solution, cost


def two_devices(p: Partition, engine: str = "auto") -> Solution:
    """Exact optimum for ``k == 2`` without caps (label 0 = device 0 = source side)."""
    if p.k != 2 or p.constrained:
        raise ValueError("two_devices needs exactly two devices and no load/memory caps")
    t0 = time.perf_counter()
    force = _force_two(p)
    labels, energy = binary_cut(p.unary[:, 0], p.unary[:, 1], p.u, p.v, p.w, p.w, force, engine)
    value = cost(p, labels)
    assert value == energy + p.offset, (value, energy, p.offset)
    return Solution(labels, value, "min-cut", value, True, time.perf_counter() - t0)


def _force_two(p: Partition) -> np.ndarray:
    a0, a1 = p.allowed[:, 0], p.allowed[:, 1]
    if (~a0 & ~a1).any():
        raise ValueError("a node is allowed on no device")
    force = np.full(p.n, -1, dtype=np.int64)
    force[a0 & ~a1] = 0
    force[a1 & ~a0] = 1
    return force


def expansion(p: Partition, init: np.ndarray | None = None, max_sweeps: int = 20,
              engine: str = "auto") -> Solution:
    """Expansion moves until every device in a row fails to improve (a full sweep).

    Where the isolation bound applies, its k cuts are computed first: they give the lower
    bound and a second start (every node on the side of the pins it is tied to); the cheaper
    of that and ``init`` is expanded (fewer moves afterwards)."""
    if p.constrained:
        raise ValueError("expansion does not handle load/memory caps")
    t0 = time.perf_counter()
    lb, sides = _isolation(p, engine)
    starts = [np.asarray(init, dtype=np.int64).copy()] if init is not None else [initial_labels(p)]
    if sides is not None:
        starts.append(_from_sides(p, sides, starts[0]))
    labels = min(starts, key=lambda a: cost(p, a))  # first wins ties
    best = cost(p, labels)
    moves = failures = 0
    alpha = 0
    # stop once every device has failed to improve in a row (a full sweep without change)
    while failures < p.k and moves < max_sweeps * p.k:
        cand = _expand(p, labels, alpha, engine)
        c = cost(p, cand)
        moves += 1
        if c < best:
            labels, best, failures = cand, c, 0
        else:
            failures += 1
        alpha = (alpha + 1) % p.k
    optimal = lb is not None and lb >= best
    return Solution(labels, best, "expansion", lb, optimal, time.perf_counter() - t0,
                    [f"{moves} expansion moves"])


def _from_sides(p: Partition, sides: dict, fallback: np.ndarray) -> np.ndarray:
    """Free nodes on exactly one device's isolated side go there; the rest keep ``fallback``."""
    count = np.zeros(p.n, dtype=np.int64)
    which = np.full(p.n, -1, dtype=np.int64)
    for d, side in sides.items():
        count += side
        which[side] = d
    out = fallback.copy()
    one = (count == 1) & p.allowed[np.arange(p.n), np.clip(which, 0, p.k - 1)]
    out[one] = which[one]
    return out


def initial_labels(p: Partition) -> np.ndarray:
    """Cheapest allowed device per node (ties: lowest index) — a feasible start."""
    big = np.iinfo(np.int64).max // 4
    return np.where(p.allowed, p.unary, big).argmin(axis=1).astype(np.int64)


def _expand(p: Partition, labels: np.ndarray, alpha: int, engine: str) -> np.ndarray:
    """One alpha-expansion: x_v = 1 moves v to ``alpha``; the pair energy of a Potts edge
    with current labels (a, b) decomposes into unary parts plus one arc u->v."""
    rows = np.arange(p.n)
    cost0 = p.unary[rows, labels]
    cost1 = p.unary[:, alpha].copy()
    force = np.full(p.n, -1, dtype=np.int64)
    force[(labels == alpha) | ~p.allowed[:, alpha]] = 0
    a, b, w = labels[p.u], labels[p.v], p.w
    e00 = w * (a != b)
    e01 = w * (a != alpha)
    e10 = w * (alpha != b)
    add_u = e10 - e00  # when x_u = 1
    add_v = -e10  # E11 - E10, when x_v = 1
    pair = e01 + e10 - e00  # arc u->v (x_u = 0, x_v = 1); >= 0 for a metric
    extra1 = np.zeros(p.n, dtype=np.int64)
    np.add.at(extra1, p.u, add_u)
    np.add.at(extra1, p.v, add_v)
    cost0_total = cost0.copy()
    # E00 is a constant per edge; binary_cut only needs relative costs
    x, _ = binary_cut(cost0_total, cost1 + extra1, p.u, p.v, pair, np.zeros_like(pair), force, engine)
    out = labels.copy()
    out[x == 1] = alpha
    return out


def isolation_bound(p: Partition, engine: str = "auto") -> int | None:
    """A lower bound for pure transfer cost with pinned nodes (no compute term): each
    device's pinned nodes cut off from every other pin costs at least its isolating cut,
    and an optimal placement pays every cut edge on exactly two sides, so
    ``OPT >= ceil(sum of isolating cuts / 2)``. None when the bound does not apply."""
    return _isolation(p, engine)[0]


def _isolation(p: Partition, engine: str):
    """(bound, {device: nodes on its side of its isolating cut}) or (None, None)."""
    if p.unary.any():
        return None, None
    n_allowed = p.allowed.sum(axis=1)
    if ((n_allowed != 1) & (n_allowed != p.k)).any():
        return None, None
    pinned = n_allowed == 1
    pin_dev = np.where(pinned, p.allowed.argmax(axis=1), -1)
    total = 0
    sides = {}
    zeros = np.zeros(p.n, dtype=np.int64)
    for d in range(p.k):
        if not (pin_dev == d).any():
            continue
        force = np.where(pin_dev == d, 0, np.where(pinned, 1, -1))
        labels, value = binary_cut(zeros, zeros, p.u, p.v, p.w, p.w, force, engine)
        total += value
        sides[d] = labels == 0
    return p.offset + (total + 1) // 2, sides
