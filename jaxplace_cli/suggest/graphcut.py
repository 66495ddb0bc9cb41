"""Binary labelling by one minimum cut: the building block of the exact two-device solver
and of the expansion moves used for more devices.

Energy over ``x in {0, 1}^n``::

    E(x) = const + sum_v (cost0[v] if x_v == 0 else cost1[v])
                 + sum_e cap_uv[e] * [x_u == 0 and x_v == 1] + cap_vu[e] * [x_u == 1 and x_v == 0]

with non-negative pair capacities (a submodular energy). Label 0 is the source side. Nodes
with a forced label are contracted into the source or sink instead of being tied to it by
"infinite" arcs, so every capacity is a real cost and nothing can overflow.
"""
from __future__ import annotations

import numpy as np

from jaxplace_cli.suggest.maxflow import min_cut


def binary_cut(cost0, cost1, eu, ev, cap_uv, cap_vu, force=None, engine: str = "auto"):
    """Minimise ``E``; ``force[v]`` is -1 (free), 0 or 1. Returns ``(labels, energy)``."""
    cost0 = np.asarray(cost0, dtype=np.int64)
    cost1 = np.asarray(cost1, dtype=np.int64)
    n = cost0.size
    eu = np.asarray(eu, dtype=np.int64)
    ev = np.asarray(ev, dtype=np.int64)
    cap_uv = np.asarray(cap_uv, dtype=np.int64)
    cap_vu = np.asarray(cap_vu, dtype=np.int64)
    if (cap_uv < 0).any() or (cap_vu < 0).any():
        raise ValueError("pair capacities must be non-negative (the energy must be submodular)")
    force = np.full(n, -1, dtype=np.int64) if force is None else np.asarray(force, dtype=np.int64)
    free = force < 0
    labels = np.where(free, 0, force)
    const = int(np.where(force == 1, cost1, cost0)[~free].sum())
    # index of free nodes in the flow graph; s and t after them
    idx = np.full(n, -1, dtype=np.int64)
    idx[free] = np.arange(int(free.sum()))
    nf = int(free.sum())
    s, t = nf, nf + 1
    # pair terms touching forced nodes become unary terms or constants
    fu, fv = force[eu], force[ev]
    both = (fu >= 0) & (fv >= 0)
    const += int(cap_uv[both & (fu == 0) & (fv == 1)].sum() + cap_vu[both & (fu == 1) & (fv == 0)].sum())
    add1 = np.zeros(n, dtype=np.int64)  # extra cost when x_v = 1
    add0 = np.zeros(n, dtype=np.int64)  # extra cost when x_v = 0
    m = (fu == 0) & (fv < 0)  # u on source side: cost cap_uv when v = 1
    np.add.at(add1, ev[m], cap_uv[m])
    m = (fu == 1) & (fv < 0)  # u on sink side: cost cap_vu when v = 0
    np.add.at(add0, ev[m], cap_vu[m])
    m = (fv == 0) & (fu < 0)  # v source side: cost cap_vu when u = 1
    np.add.at(add1, eu[m], cap_vu[m])
    m = (fv == 1) & (fu < 0)  # v sink side: cost cap_uv when u = 0
    np.add.at(add0, eu[m], cap_uv[m])
    c0 = (cost0 + add0)[free]
    c1 = (cost1 + add1)[free]
    base = np.minimum(c0, c1)
    const += int(base.sum())
    c0, c1 = c0 - base, c1 - base
    nodes = np.arange(nf, dtype=np.int64)
    tails = [np.full(nf, s), nodes]  # s->v cut when v on sink side: pays c1
    heads = [nodes, np.full(nf, t)]  # v->t cut when v on source side: pays c0
    caps = [c1, c0]
    pf = (fu < 0) & (fv < 0)
    tails += [idx[eu[pf]], idx[ev[pf]]]
    heads += [idx[ev[pf]], idx[eu[pf]]]
    caps += [cap_uv[pf], cap_vu[pf]]
    value, side = min_cut(nf + 2, np.concatenate(tails), np.concatenate(heads),
                          np.concatenate(caps), s, t, engine=engine)
    labels[free] = np.where(side[:nf], 0, 1)
    return labels, const + int(value)
