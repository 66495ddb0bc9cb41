"""What a placement will move: transfers per kind and per site, ping-pong returns, and time.

The same function describes the recorded placement (a check that the model reproduces what
was measured), the suggested one (the prediction) and, through ``measure``, any recorded run
(what ``--verify`` compares against). Host transfers are constants of the run graph in count
and bytes, but not in device: a host value fed to an op the placement moves is uploaded once,
to the op's new device, and a value the host reads is read once, from the device its producer
now runs on (``routes``). Every use of a value on a device other than its producer's is one
device-to-device transfer, recorded at the site of the op that used it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jaxplace_cli.model.events import D2D, D2H, H2D, HOST, TRANSFER_KINDS
from jaxplace_cli.store import run_graph as q
from jaxplace_cli.suggest.from_run import RunGraph


@dataclass
class Traffic:
    """Transfers by kind and by (kind, "file:line"): counts and bytes; ``apis`` names what
    moved them (for display; comparisons ignore it, since a policy's move and JAX's own copy
    of the same value at the same line are the same traffic)."""

    totals: dict = field(default_factory=lambda: {k: [0, 0] for k in TRANSFER_KINDS})
    sites: dict = field(default_factory=dict)
    apis: dict = field(default_factory=dict)
    routes: dict = field(default_factory=dict)  # (kind, "host>cpu:1") -> [count, bytes]: h2d, d2h
    round_trips: int = 0
    compute_ns: int = 0
    transfer_ns: int = 0

    def add(self, kind: str, site: str, api: str, nbytes: int, count: int = 1) -> None:
        t = self.totals.setdefault(kind, [0, 0])
        t[0] += count
        t[1] += nbytes
        s = self.sites.setdefault((kind, site), [0, 0])
        s[0] += count
        s[1] += nbytes
        self.apis.setdefault((kind, site), set()).add(api)

    def add_route(self, kind: str, src: str, dst: str, nbytes: int, count: int = 1) -> None:
        r = self.routes.setdefault((kind, f"{src}>{dst}"), [0, 0])
        r[0] += count
        r[1] += nbytes

    def count(self, kind: str) -> int:
        return self.totals.get(kind, [0, 0])[0]

    def bytes(self, kind: str) -> int:
        return self.totals.get(kind, [0, 0])[1]


def predict(rg: RunGraph, assign: np.ndarray) -> Traffic:
    a = np.asarray(assign, dtype=np.int64)
    g = rg.graph
    out = Traffic()
    devices, recorded = g.devices, rg.recorded
    for h in rg.host:
        out.add(h.kind, f"{h.file}:{h.line}", h.api, h.nbytes)
        # the device end follows the op (h2d) or the value's producer (d2h) where a placement
        # moves it; elsewhere (sharded, pinned, unknown) it stays the recorded end
        v = h.node
        dev = devices[int(a[v])] if v >= 0 and a[v] != recorded[v] else h.device
        if h.kind == H2D:
            out.add_route(H2D, HOST, dev, h.nbytes)
        else:
            out.add_route(D2H, dev, HOST, h.nbytes)
    cut = np.flatnonzero(a[g.src] != a[g.dst]) if g.m else np.zeros(0, dtype=np.int64)
    for e in cut.tolist():
        file, line, api = rg.use_sites[e]
        out.add(D2D, f"{file}:{line}", api, int(g.nbytes[e]))
    out.round_trips = round_trips(g.n, g.src, g.dst, a)
    out.compute_ns = compute_time(rg, a)
    out.transfer_ns = int(g.comm[cut].sum()) if cut.size else 0
    return out


def compute_time(rg: RunGraph, a: np.ndarray) -> int:
    """Op time of placement ``a``: each op's recorded time without the compilation inside
    it, plus one compilation of each op name per device the placement runs it on (a run
    that spread an op over two devices compiled it twice; one device compiles it once)."""
    g = rg.graph
    if not g.n:
        return 0
    unary = g.unary[np.arange(g.n), a]
    if rg.compile_ns is None or not rg.compile_per_device:
        return int(unary.sum())
    steady = np.maximum(unary - rg.compile_ns, 0)
    used: dict = {}
    for v, nd in enumerate(rg.nodes):
        if nd.name in rg.compile_per_device:
            used.setdefault(nd.name, set()).add(int(a[v]))
    return int(steady.sum()) + sum(rg.compile_per_device[n] * len(d) for n, d in used.items())


def round_trips(n: int, src, dst, assign) -> int:
    """Moves that bring data back to a device it was on before, along the data flow (the
    audit's ping-pong notion). A node's history is the set of devices its data visited (a
    bit mask); a node inherits the richest history among its inputs."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    order = np.argsort(dst, kind="stable")
    ptr = np.searchsorted(dst[order], np.arange(n + 1)).tolist()
    preds = src[order].tolist()
    bit = (np.left_shift(1, np.asarray(assign, dtype=np.int64))).tolist()
    hist = [0] * n
    trips = 0
    for v in range(n):  # node order is topological
        here = bit[v]
        best, best_n = 0, -1
        for i in range(ptr[v], ptr[v + 1]):
            u = preds[i]
            seen = hist[u] or bit[u]
            if bit[u] != here and seen & here:
                trips += 1
            seen |= here
            c = seen.bit_count()
            if c > best_n:
                best, best_n = seen, c
        hist[v] = best | here
    return trips


def measure(run, cwd: str | None = None) -> Traffic:
    """The transfers a recorded run actually made, keyed like a prediction."""
    from jaxplace_cli.suggest.from_run import _rel

    cwd = run.manifest.cwd if cwd is None else cwd
    sites = run.store.sites()
    out = Traffic()
    for kind, sid, api, n, b in q.suggest_transfer_groups(run.store):
        s = sites.get(sid)
        label = f"{_rel(s.file, cwd)}:{s.line}" if s else "?:0"
        out.add(kind, label, _normal_api(api), int(b or 0), int(n))
    for kind, src, dst, nb, *_ in q.suggest_host_transfers(run.store, (H2D, D2H)):
        out.add_route(kind, src, dst, max(int(nb or 0), 0))
    out.compute_ns = q.suggest_op_time(run.store)
    return out


def expected(measured: Traffic, baseline: Traffic, predicted: Traffic) -> Traffic:
    """What a re-run under the suggestion should record: the run's own measurement, changed
    only where the policy changes something — per (kind, site), measured + predicted -
    baseline (the model under the suggestion minus the model where the ops ran). Traffic the
    model does not hold (an explicit replicated ``device_put``, pmap key shards, callback
    legs) is the script's under any placement and is carried over exactly; a suggestion that
    moves nothing expects exactly the measurement. The host legs' routes likewise: measured,
    with the legs the policy sends elsewhere moved (``predict``). Op time and ping-pong returns stay
    the model's."""
    out = Traffic(round_trips=predicted.round_trips, compute_ns=predicted.compute_ns,
                  transfer_ns=predicted.transfer_ns)
    out.totals = {k: [0, 0] for k in TRANSFER_KINDS}
    for key in sorted(set(measured.sites) | set(baseline.sites) | set(predicted.sites)):
        m, b, p = (t.sites.get(key, [0, 0]) for t in (measured, baseline, predicted))
        n, nb = m[0] + p[0] - b[0], m[1] + p[1] - b[1]
        if n <= 0 and nb <= 0:
            continue
        apis = measured.apis.get(key, set()) | predicted.apis.get(key, set())
        out.add(key[0], key[1], "", max(nb, 0), max(n, 0))
        out.apis[key] = apis
    for key in sorted(set(measured.routes) | set(baseline.routes) | set(predicted.routes)):
        m, b, p = (t.routes.get(key, [0, 0]) for t in (measured, baseline, predicted))
        n, nb = m[0] + p[0] - b[0], m[1] + p[1] - b[1]
        if n > 0 or nb > 0:
            out.routes[key] = [max(n, 0), max(nb, 0)]
    return out


def _normal_api(api: str) -> str:
    """``mul (moved by policy rules:p.toml rule 2)`` -> ``mul (moved by policy)``."""
    i = api.find(" (moved by policy")
    return api[:i] + " (moved by policy)" if i >= 0 else api
