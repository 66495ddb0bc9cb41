"""The integer program: the optimality reference for small partition problems.

Variables ``x[v, d]`` (binary: v runs on d) and ``z[e]`` (continuous in [0, 1]: edge e is
cut). ``z[e] >= x[u, d] - x[v, d]`` for every device d makes z 1 exactly when the ends
differ, because each node has one device. Load and memory caps are plain knapsack rows.
When all devices are interchangeable (same costs, same caps, nothing pinned) node 0 is
fixed to device 0, which removes k-fold symmetry without losing an optimum.

HiGHS (through ``scipy.optimize.milp``) is run with a *node* limit rather than only a time
limit, so that the same input gives the same answer on any machine; the wall-clock limit is
a safety net. The objective is re-evaluated exactly from the rounded solution.
"""
from __future__ import annotations

import time
from math import gcd

import numpy as np

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.suggest.model import Partition, Solution, cost, feasible


class MilpFailed(JaxplaceError):
    """HiGHS found no feasible placement within its limits (or proved there is none)."""


def solve_milp(p: Partition, node_limit: int = 20000, time_limit: float = 60.0) -> Solution:
    # here, not at module level: scipy.optimize takes ~0.5 s to import, and every audit that
    # attaches a suggestion imports this module while few ever need the MILP (bench P8)
    from scipy.optimize import Bounds, LinearConstraint, milp

    t0 = time.perf_counter()
    n, k, m = p.n, p.k, p.u.size
    nx = n * k
    scale = _common_divisor(p)
    c = np.concatenate([p.unary.reshape(-1), p.w]).astype(np.float64) / scale
    integrality = np.concatenate([np.ones(nx), np.zeros(m)])
    lb = np.zeros(nx + m)
    ub = np.ones(nx + m)
    ub[:nx][~p.allowed.reshape(-1)] = 0
    if _symmetric(p) and n:
        ub[1:k] = 0  # node 0 on device 0
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0
    # one device per node
    rows.append(np.repeat(np.arange(n), k))
    cols.append(np.arange(nx))
    vals.append(np.ones(nx))
    lo.append(np.ones(n))
    hi.append(np.ones(n))
    r += n
    # z_e - x[u,d] + x[v,d] >= 0
    if m:
        e = np.repeat(np.arange(m), k)
        d = np.tile(np.arange(k), m)
        rid = r + np.arange(m * k)
        rows += [rid, rid, rid]
        cols += [nx + e, p.u[e] * k + d, p.v[e] * k + d]
        vals += [np.ones(m * k), -np.ones(m * k), np.ones(m * k)]
        lo.append(np.zeros(m * k))
        hi.append(np.full(m * k, np.inf))
        r += m * k
    for weights, cap in ((p.load, p.load_cap), (p.mem, p.mem_cap)):
        if cap is None:
            continue
        caps = np.broadcast_to(np.asarray(cap, dtype=np.float64), (k,))
        for dev in range(k):
            rows.append(np.full(n, r))
            cols.append(np.arange(n) * k + dev)
            vals.append(weights.astype(np.float64))
            lo.append(np.array([-np.inf]))
            hi.append(np.array([caps[dev]]))
            r += 1
    from scipy.sparse import coo_matrix

    A = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                   shape=(r, nx + m)).tocsr()
    res = milp(c, integrality=integrality, bounds=Bounds(lb, ub),
               constraints=LinearConstraint(A, np.concatenate(lo), np.concatenate(hi)),
               options={"node_limit": node_limit, "time_limit": time_limit,
                        "mip_rel_gap": 0.0, "presolve": True})
    if res.x is None:
        raise MilpFailed(f"integer program: {res.message}")
    assign = np.asarray(res.x[:nx]).reshape(n, k).argmax(axis=1).astype(np.int64)
    if not feasible(p, assign):
        raise MilpFailed("integer program returned an infeasible rounding")
    value = cost(p, assign)
    optimal = res.status == 0
    bound = getattr(res, "mip_dual_bound", None)
    lower = value if optimal else (p.offset + int(np.ceil(bound * scale - 1e-6)) if bound is not None
                                   and np.isfinite(bound) else None)
    notes = [f"HiGHS: {res.message}", f"{getattr(res, 'mip_node_count', 0)} branch-and-bound nodes"]
    return Solution(assign, value, "milp", lower, optimal, time.perf_counter() - t0, notes)


def _common_divisor(p: Partition) -> int:
    g = 0
    for arr in (p.w, p.unary.reshape(-1)):
        for x in np.unique(arr).tolist():
            g = gcd(g, int(x))
            if g == 1:
                return 1
    return max(g, 1)


def _symmetric(p: Partition) -> bool:
    """Devices are interchangeable: equal unary columns, everything allowed everywhere, one cap."""
    if not p.allowed.all():
        return False
    if p.n and (p.unary != p.unary[:, :1]).any():
        return False
    if p.mem_cap is not None and np.unique(np.asarray(p.mem_cap)).size > 1:
        return False
    return True
