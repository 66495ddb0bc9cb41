"""The placement problem every solver reads: a weighted dataflow graph and its constraints.

Why one plain-array model: the graph comes from two very different places (a recorded run,
a published JSON graph), yet every solver — min cut, integer program, multilevel search,
list scheduling, pipeline DP — must see the same numbers, so that "exact" and "heuristic"
results can be compared value for value. Everything is an integer (bytes, nanoseconds, or
fixed-point units of a file's costs): solvers compare exactly and max-flow stays exact.

Node indices are a topological order of the dataflow (a recorded run's dispatch order is
one by construction); makespan and pipeline solvers rely on it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TRANSFERS, TOTAL, MAKESPAN, THROUGHPUT = "transfers", "total", "makespan", "throughput"
OBJECTIVES = (TRANSFERS, TOTAL, MAKESPAN, THROUGHPUT)


@dataclass
class Graph:
    """Dataflow graph: ``n`` nodes on ``devices``; one edge per use of a value.

    ``nbytes[e]``/``comm[e]``: bytes and transfer time of edge ``e`` when its ends are on
    different devices; ``value[e]``: the value it carries (edges of one value share it);
    ``unary[v, d]``: compute time of ``v`` on device ``d``; ``allowed[v, d]``: ``v`` may run on
    ``d`` (pins and unsupported platforms); ``mem[v]``: bytes ``v`` keeps on its device;
    ``color[v]``: nodes of one colour (>= 0) must share a device. ``backward``/``host``: only
    the ``throughput`` model reads them (stages.py).
    """

    devices: tuple
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    comm: np.ndarray
    value: np.ndarray
    unary: np.ndarray
    allowed: np.ndarray
    mem: np.ndarray
    color: np.ndarray = None
    mem_cap: np.ndarray = None  # per device, bytes; None = unlimited
    names: list = field(default_factory=list)
    backward: np.ndarray = None  # per node: a backward (training) op, placed with its colour class
    host: np.ndarray = None  # per device: holds the data, pays no transfer time (the paper's CPU)

    def __post_init__(self):
        n = self.unary.shape[0]
        if self.color is None:
            self.color = np.full(n, -1, dtype=np.int64)
        for name in ("src", "dst", "nbytes", "comm", "value", "mem", "color"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        self.unary = np.asarray(self.unary, dtype=np.int64)
        self.allowed = np.asarray(self.allowed, dtype=bool)

    @property
    def n(self) -> int:
        return int(self.unary.shape[0])

    @property
    def k(self) -> int:
        return len(self.devices)

    @property
    def m(self) -> int:
        return int(self.src.shape[0])


@dataclass
class Partition:
    """What the partition solvers (min cut, MILP, expansion, multilevel, brute force) see:
    minimise ``sum unary[v, a[v]] + sum w[e] * (a[u[e]] != a[v[e]])`` subject to ``allowed``,
    per-device ``load`` caps and ``mem`` caps. Edges are undirected, merged and loop-free.
    """

    k: int
    u: np.ndarray
    v: np.ndarray
    w: np.ndarray
    unary: np.ndarray
    allowed: np.ndarray
    load: np.ndarray
    mem: np.ndarray
    load_cap: int | None = None
    mem_cap: np.ndarray | None = None
    offset: int = 0  # constant cost removed by reductions

    @property
    def n(self) -> int:
        return int(self.unary.shape[0])

    @property
    def constrained(self) -> bool:
        return self.load_cap is not None or self.mem_cap is not None


@dataclass
class Solution:
    """A placement and the evidence for it: who found it, how good it provably is."""

    assign: np.ndarray
    cost: int
    solver: str
    lower_bound: int | None = None
    optimal: bool = False
    seconds: float = 0.0
    notes: list = field(default_factory=list)
    model: str = ""  # the problem ``optimal`` and ``lower_bound`` hold in (a claim names its model)

    @property
    def gap(self) -> float | None:
        """Relative gap to the lower bound (0.0 = proven optimal), None when unknown."""
        if self.optimal:
            return 0.0
        if self.lower_bound is None:
            return None
        if self.cost == 0:
            return 0.0
        return max(0.0, (self.cost - self.lower_bound) / self.cost)


def merge_edges(u, v, w, n: int):
    """Undirected, loop-free, parallel edges summed; sorted (u < v) so results are stable."""
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    w = np.asarray(w, dtype=np.int64)
    keep = (u != v) & (w > 0)
    u, v, w = u[keep], v[keep], w[keep]
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    if lo.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy(), z.copy()
    key = lo * n + hi
    uniq, inv = np.unique(key, return_inverse=True)
    ws = np.zeros(uniq.size, dtype=np.int64)
    np.add.at(ws, inv, w)
    return uniq // n, uniq % n, ws


def balance_cap(load: np.ndarray, k: int, balance: float | None) -> int | None:
    """Per-device load cap for ``--balance eps``: ``(1 + eps) * total / k``, never below the
    heaviest single node (a cap no placement can meet helps nobody)."""
    if balance is None:
        return None
    total = int(load.sum())
    cap = int(np.floor((1.0 + balance) * total / k + 1e-9))
    return max(cap, int(load.max()) if load.size else 0)


def partition_problem(g: Graph, objective: str, balance: float | None = None) -> Partition:
    """The partition view of ``g``: ``transfers`` weighs edges by bytes and ignores compute;
    ``total`` adds compute time and weighs edges by transfer time."""
    if objective == TRANSFERS:
        w = g.nbytes
        unary = np.zeros_like(g.unary)
    elif objective == TOTAL:
        w = g.comm
        unary = g.unary.copy()
    else:
        raise ValueError(f"objective {objective!r} is not a partition objective")
    u, v, w = merge_edges(g.src, g.dst, w, g.n)
    load = _balance_load(g)
    return Partition(g.k, u, v, w, unary, g.allowed.copy(), load, g.mem.copy(),
                     balance_cap(load, g.k, balance), g.mem_cap)


def _balance_load(g: Graph) -> np.ndarray:
    """What ``--balance`` balances: each node's compute time (its cheapest allowed device),
    or one unit per node when no times are known."""
    big = np.iinfo(np.int64).max
    masked = np.where(g.allowed, g.unary, big)
    load = masked.min(axis=1)
    load[load == big] = 0
    if not load.any():
        return np.ones(g.n, dtype=np.int64)
    return load


def cost(p: Partition, assign: np.ndarray) -> int:
    """The exact objective of ``assign`` (Python ints: no overflow, no rounding)."""
    a = np.asarray(assign)
    cut = a[p.u] != a[p.v]
    unary = p.unary[np.arange(p.n), a] if p.n else np.zeros(0, dtype=np.int64)
    return int(p.offset) + int(unary.sum()) + int(p.w[cut].sum())


def feasible(p: Partition, assign: np.ndarray) -> bool:
    a = np.asarray(assign)
    if p.n and not p.allowed[np.arange(p.n), a].all():
        return False
    if p.load_cap is not None:
        if (np.bincount(a, weights=p.load, minlength=p.k) > p.load_cap + 1e-9).any():
            return False
    if p.mem_cap is not None:
        if (np.bincount(a, weights=p.mem, minlength=p.k) > p.mem_cap + 1e-9).any():
            return False
    return True
