"""Read the operator/layer graph format of msr-fiddle/dnn-partitioning (the benchmark graphs
in ``shared/fixtures/placement_graphs``) into a ``Graph``.

Mapping, and why:
- devices: ``maxFPGAs`` accelerators ``acc:0..`` (the paper's "FPGA" means any accelerator)
  and, when ``include_cpu`` and ``maxCPUs > 0``, one ``cpu:0`` for ops that cannot run on an
  accelerator; the CPU has no memory cap.
- compute: ``fpgaLatency`` on accelerators (only where ``supportedOnFpga``), ``cpuLatency`` on
  the CPU; ``size`` is memory on an accelerator, capped by ``maxSizePerFPGA``.
- edges: ``cost`` is the time to move the source's output (used by ``total``, ``makespan``
  and ``throughput``); ``size`` (bytes, present in the published files though not in the
  origin's README) weighs the ``transfers`` objective, falling back to ``cost`` when absent.
  All out-edges of a node carry the same value (the node's output).
- ``colorClass``: same class => same device; ``isBackwardNode`` -> ``backward`` (a training
  graph's backward ops follow their class in a pipeline; only the forward part orders it).
- the CPU is a *host* (``host``): in the throughput model it pays no transfer time, as in the
  paper.
- times (milliseconds in the published files) become integers in units of ``1 / TIME_SCALE``
  (nanoseconds), so solvers compare exactly; costs below that resolution round to 0.
- node order: topological (Kahn's algorithm, lowest id first), which later solvers rely on.
"""
from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.untrusted import MAX_GRAPH_BYTES, load_json
from jaxplace_cli.suggest.model import Graph

TIME_SCALE = 10**6
MAX_DEVICES = 1024  # accelerators of a graph: the solvers allocate nodes x devices


class GraphFileError(JaxplaceError):
    """The file is not a readable graph in this format; the message says what is wrong."""


def _ticks(x) -> int:
    return int(round(float(x) * TIME_SCALE))


def load_graph_json(path, include_cpu: bool = True, accelerators: int | None = None) -> Graph:
    path = Path(path)
    # bounded (model/untrusted.py): a regular file of at most 64 MiB, JSON at most 64 deep
    data = load_json(path, "graph file", MAX_GRAPH_BYTES, GraphFileError)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(data.get("edges"), list):
        raise GraphFileError(f"{path}: expected an object with 'nodes' and 'edges' lists")
    try:
        return _build(data, include_cpu, accelerators)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: "1e400" ms
        raise GraphFileError(f"{path}: malformed graph ({type(exc).__name__}: {exc})") from None


def _build(data: dict, include_cpu: bool, accelerators: int | None) -> Graph:
    nodes = data["nodes"]
    ids = [int(nd["id"]) for nd in nodes]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate node ids")
    pos = {i: j for j, i in enumerate(ids)}
    edges = [(pos[int(e["sourceId"])], pos[int(e["destId"])], _ticks(e.get("cost", 0))) for e in data["edges"]]
    sizes = [int(float(e["size"])) if "size" in e else None for e in data["edges"]]
    order = _topological(len(nodes), [(a, b) for a, b, _ in edges], ids)
    rank = {old: new for new, old in enumerate(order)}
    k_acc = int(accelerators if accelerators is not None else data.get("maxFPGAs", 1))
    if not 0 <= k_acc <= MAX_DEVICES:
        raise ValueError(f"{k_acc} accelerators (at most {MAX_DEVICES})")
    cpu = include_cpu and int(data.get("maxCPUs", 0)) > 0
    devices = tuple(f"acc:{i}" for i in range(k_acc)) + (("cpu:0",) if cpu else ())
    k = len(devices)
    n = len(nodes)
    unary = np.zeros((n, k), dtype=np.int64)
    allowed = np.zeros((n, k), dtype=bool)
    mem = np.zeros(n, dtype=np.int64)
    color = np.full(n, -1, dtype=np.int64)
    backward = np.zeros(n, dtype=bool)
    names = [""] * n
    for j, nd in enumerate(nodes):
        v = rank[j]
        ok = bool(nd.get("supportedOnFpga", 1))
        unary[v, :k_acc] = _ticks(nd.get("fpgaLatency", 0))
        allowed[v, :k_acc] = ok
        if cpu:
            unary[v, k_acc] = _ticks(nd.get("cpuLatency", 0))
            allowed[v, k_acc] = True
        mem[v] = int(float(nd.get("size", 0)))
        if "colorClass" in nd:
            color[v] = int(nd["colorClass"])
        names[v] = str(nd.get("name", nd["id"]))
        backward[v] = bool(nd.get("isBackwardNode", 0))
    if not allowed.any(axis=1).all():
        raise ValueError("an operator is supported on no device (no CPU in this setting)")
    src = np.array([rank[a] for a, _, _ in edges], dtype=np.int64)
    dst = np.array([rank[b] for _, b, _ in edges], dtype=np.int64)
    cost = np.array([c for _, _, c in edges], dtype=np.int64)
    nbytes = np.array([c if b is None else b for (_, _, c), b in zip(edges, sizes)], dtype=np.int64)
    cap = float(data.get("maxSizePerFPGA", 0)) or None
    mem_cap = None
    if cap is not None:
        big = np.iinfo(np.int64).max // 4
        mem_cap = np.array([int(cap)] * k_acc + ([big] if cpu else []), dtype=np.int64)
    host = np.array([False] * k_acc + ([True] if cpu else []), dtype=bool)
    return Graph(devices, src, dst, nbytes, cost, src.copy(), unary, allowed, mem, color,
                 mem_cap, names, backward, host)


def _topological(n: int, edges, ids) -> list[int]:
    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    heap = [(ids[v], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, v = heapq.heappop(heap)
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (ids[w], w))
    if len(out) != n:
        raise ValueError("the graph has a cycle")
    return out


def placement_json(g: Graph, assign: np.ndarray, max_load: int | None = None) -> dict:
    """A placement in the shape of the origin's human-expert files: device -> node names."""
    out: dict = {"devices": {}}
    for d, name in enumerate(g.devices):
        out["devices"][name] = [g.names[v] if g.names else v for v in np.flatnonzero(np.asarray(assign) == d).tolist()]
    if max_load is not None:
        out["maxLoad"] = max_load / TIME_SCALE
    return out
