"""A recorded run as a placement graph: which ops could go where, and what each costs.

Nodes and what pins them (the policy engine can only re-place what it is consulted on):

- **ops** (``jit``/``jnp``/``method``/``prim``): free — a rules file can send each to any
  allowed device. An op whose result was sharded over several devices keeps its place.
- **device_put**: the user named the target, and the policy engine is not consulted for it,
  so it is pinned to the device it put to. With ``retarget_puts`` it becomes free (the
  suggestion then says which targets to change; a rule ``op = "device_put"`` expresses it).
- **sources**: arrays that appear without a recorded producer (made inside untraced code)
  stay where they were.
- **host data** is not a node: uploading a numpy array or a Python scalar costs the same
  bytes whichever device receives it, and every host read (``float(x)``, ``np.asarray``,
  ``device_get``) reads its bytes once whichever device holds them. Those transfers are
  carried as constants (``HostTransfer``) with their sites, so predictions still list them;
  their device end follows the node they belong to (the op an upload feeds, the producer of
  a value read), which is how ``predict`` routes them under a new placement.

Edges: one per *use* of a value (an op reading the same array twice uses it twice). That is
what jaxplace and JAX do: the placer moves an argument for every call that needs it
elsewhere, and JAX copies an uncommitted argument on every call; there is no copy cache.

Costs: ``dur_ns`` (host dispatch time) where the op ran. Elsewhere: the same on a device of
the same platform; on another platform, scaled by the median ratio of that op name's
times measured on both platforms, else assumed equal (said in ``notes``). Transfer time is
bytes divided by the bandwidth measured from the run's explicit device-to-device puts
(bytes / dispatch time), or ``DEFAULT_BYTES_PER_NS`` when the run has none.
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from jaxplace_cli.model.events import D2D, D2H, H2D, OP_DEVICE_GET, OP_DEVICE_PUT, OP_JIT, OP_JNP, OP_METHOD, OP_PRIM
from jaxplace_cli.store import run_graph as q
from jaxplace_cli.suggest.model import Graph

POLICY_KINDS = (OP_JIT, OP_JNP, OP_METHOD, OP_PRIM)  # what the placer consults a policy for
SOURCE = "source"
DEFAULT_BYTES_PER_NS = 10.0  # 10 GB/s


@dataclass
class OpNode:
    """One graph node and the stable keys a rule can match it by."""

    seq: int
    kind: str
    name: str
    site: int
    file: str  # as a rule writes it: relative to the run's cwd when inside it
    line: int
    function: str
    occurrence: int  # n-th policy consultation at (site, name); -1 when not rule-placeable
    placeable: bool
    backward: bool = False  # a backward-pass op (a rule's ``pass = "backward"`` matches it)


@dataclass
class HostTransfer:
    """A host<->device transfer whose bytes do not depend on placement."""

    kind: str
    nbytes: int
    file: str
    line: int
    api: str
    node: int  # the node whose device is the device end (-1: keep the recorded end)
    device: str  # the recorded device end


@dataclass
class RunGraph:
    graph: Graph
    nodes: list[OpNode]
    host: list[HostTransfer]
    recorded: np.ndarray  # device index where each node ran
    use_sites: list = field(default_factory=list)  # per edge: (file, line, api) where a move would be recorded
    bytes_per_ns: float = DEFAULT_BYTES_PER_NS
    retarget_puts: bool = False
    notes: list = field(default_factory=list)
    # XLA compilation inside each node's recorded time (ns), and per op name what one
    # device's compiles of it cost: a placement compiles each op once per device it uses
    compile_ns: np.ndarray | None = None
    compile_per_device: dict = field(default_factory=dict)
    # buffer id -> the node that made it (a placer's copy: the node of the array it copied),
    # and the recorded run's placer copies: what suggest/memory_limit.py replays
    producer: dict = field(default_factory=dict, repr=False)
    copies: set = field(default_factory=set, repr=False)

    def groups(self) -> np.ndarray:
        """Per node, the id of what one rule can address: placeable ops of one site
        (file, line, function) and op name; -1 for nodes no rule places. A fresh run calls a
        loop's ops more (or fewer) times than the recorded one, so a suggestion places each
        group as a whole (on one device, or with its data): never by occurrence number. The
        forward and backward calls of a site are two groups (``pass`` tells them apart)."""
        ids: dict = {}
        return np.array([ids.setdefault((nd.file, nd.line, nd.function, nd.name, nd.backward), len(ids))
                         if nd.placeable else -1 for nd in self.nodes], dtype=np.int64)


def _rel(path: str, cwd: str) -> str:
    if cwd and path.startswith(os.path.join(cwd, "")):
        return os.path.relpath(path, cwd)
    return path


def _ints(text) -> list[int]:
    if not text:
        return []
    if isinstance(text, (tuple, list)):
        return [int(x) for x in text]
    from jaxplace_cli.analysis.rules.base import ids

    return ids(str(text))  # DataError for a list that is not numbers (a damaged store)


def build_run_graph(run, devices: list[str] | None = None, retarget_puts: bool = False) -> RunGraph:
    # long: one pass over the run's ops in dispatch order builds nodes, data edges, pins and the
    # host legs together; split up, a dozen accumulators would travel between the pieces
    """``run``: an ``analysis.run.RunData``. ``devices``: labels the suggestion may use
    (default: every device the run saw)."""
    store = run.store
    q.check_sizes(store)
    manifest = run.manifest
    cwd = manifest.cwd
    sites = store.sites()
    all_devices = manifest.device_names
    bufs = q.suggest_buffers(store)
    ops = q.suggest_ops(store)
    known = set(all_devices)
    all_devices += [d for d in q.suggest_op_devices(store) if d not in known]
    moves = defaultdict(list)  # op seq -> the device-to-device moves it caused
    for op_seq, msrc, mdst, mbytes, mbuf in q.suggest_device_moves(store, D2D):
        moves[op_seq].append((msrc, mdst, mbytes, mbuf))
    dev_index = {d: i for i, d in enumerate(all_devices)}
    choose = set(devices) if devices else set(all_devices)
    unknown = choose - set(all_devices)
    if unknown:
        raise ValueError(f"device {sorted(unknown)[0]} is not in this run (devices: {', '.join(all_devices)})")
    free_mask = np.array([d in choose for d in all_devices], dtype=bool)
    k = len(all_devices)

    nodes: list[OpNode] = []
    recorded: list[int] = []
    pinned: list[int] = []  # device index, -1 = free
    dur: list[int] = []
    mem: list[int] = []
    src, dst, nbytes, value, use_sites = [], [], [], [], []
    producer: dict[int, int] = {}
    copies: set = set()
    by_seq: dict[int, int] = {}
    occ: dict = defaultdict(int)
    from jaxplace_cli.analysis.rules.loss import loss_findings

    notes = [f.message for f in loss_findings(run)]  # a run that lost data says so here too
    sharded = 0
    last_out: dict = {}  # device index -> the last node whose result appeared there
    color: dict = {}  # node -> node it must share a device with (data that follows data)

    site_cache: dict = {}

    def site_of(sid):
        out = site_cache.get(sid)
        if out is None:
            s = sites.get(sid)
            out = site_cache[sid] = (_rel(s.file, cwd), s.line, s.function) if s else ("?", 0, "?")
        return out

    def add_node(seq, kind, name, sid, occurrence, placeable, rec_dev, pin, cost, backward=False):
        file, line, func = site_of(sid)
        nodes.append(OpNode(seq, kind, name, sid, file, line, func, occurrence, placeable, bool(backward)))
        recorded.append(rec_dev)
        pinned.append(pin)
        dur.append(cost)
        mem.append(0)
        return len(nodes) - 1

    for seq, kind, name, op_devices, sid, in_bufs, out_bufs, error, dur_ns, backward in ops:
        key = (sid, name)
        if kind in POLICY_KINDS or kind == OP_DEVICE_PUT:
            occurrence = occ[key]
            occ[key] += 1  # the placer counts every consultation, failed calls included
        else:
            occurrence = -1
        if error or kind == OP_DEVICE_GET:
            continue
        devs = [d for d in op_devices.split(",") if d]
        rec = dev_index.get(devs[0], -1) if devs else -1
        if kind == OP_DEVICE_PUT:
            placeable = retarget_puts
            pin = -1 if retarget_puts else rec
        elif kind in POLICY_KINDS:
            placeable = len(devs) <= 1
            pin = -1 if placeable else rec
            sharded += not placeable
        else:  # unknown kinds (future hooks): keep them where they ran
            placeable, pin = False, rec
        if rec < 0:
            continue
        file, line, _ = site_of(sid)
        api = "jax.device_put" if kind == OP_DEVICE_PUT else f"{name} (moved by policy)"
        use = (file, line, api)
        pending, follow = [], []
        for b in _ints(in_bufs):
            if b == 0:
                continue
            if b not in producer:
                info = bufs.get(b)
                where = dev_index.get(info[0], -1) if info is not None else -1
                if where < 0:
                    continue
                origin = _origin(b, info, moves.get(seq, ()), producer, dev_index)
                if origin[0] == "copy":  # a copy the placer made of a recorded array
                    producer[b] = producer[origin[1]]
                    copies.add(b)
                else:
                    producer[b] = add_node(info[2], SOURCE, "array", info[3], -1, False, origin[1], -1, 0)
                    mem[producer[b]] += max(info[1], 0)
                    follow.append((producer[b], origin))
            pending.append(b)
        v = add_node(seq, kind, name, sid, occurrence if placeable else -1, placeable,
                     rec, pin, max(int(dur_ns), 0), backward)
        for node, (how, where) in follow:
            _follow(node, how, where, v, last_out, pinned, color)
        by_seq[seq] = v
        for b in pending:
            info = bufs.get(b)
            src.append(producer[b])
            dst.append(v)
            nbytes.append(max(info[1], 0) if info is not None else 0)
            value.append(b)
            use_sites.append(use)
        for b in _ints(out_bufs):
            if b and b not in producer:
                producer[b] = v
                info = bufs.get(b)
                mem[v] += max(info[1], 0) if info is not None else 0
                if info is not None and dev_index.get(info[0], -1) >= 0:
                    last_out[dev_index[info[0]]] = v
    if sharded:
        notes.append(f"{sharded} op(s) with sharded results keep their placement")

    host = []
    for tkind, src_dev, dst_dev, nb, api, sid, buf, op_seq in q.suggest_host_transfers(store, (H2D, D2H)):
        file, line, _ = site_of(sid)
        if tkind == H2D:
            node, device = by_seq.get(op_seq, -1), dst_dev
        else:
            node, device = producer.get(buf, -1), src_dev
        host.append(HostTransfer(tkind, max(nb, 0), file, line, api, node, device))

    n = len(nodes)
    bpn = _bandwidth(store)
    unary, est_note = _costs(nodes, np.array(dur, dtype=np.int64), np.array(recorded, dtype=np.int64), all_devices)
    if est_note:
        notes.append(est_note)
    allowed = np.zeros((n, k), dtype=bool)
    pin_arr = np.array(pinned, dtype=np.int64)
    allowed[pin_arr < 0] = free_mask
    allowed[np.flatnonzero(pin_arr >= 0), pin_arr[pin_arr >= 0]] = True
    nb = np.array(nbytes, dtype=np.int64)
    comm = np.ceil(nb / bpn).astype(np.int64)
    g = Graph(tuple(all_devices), np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
              nb, comm, np.array(value, dtype=np.int64), unary, allowed, np.array(mem, dtype=np.int64),
              _colors(n, color), names=[f"{nd.name}@{nd.file}:{nd.line}" for nd in nodes])
    rg = RunGraph(g, nodes, host, np.array(recorded, dtype=np.int64), use_sites, bpn, retarget_puts, notes,
                  producer=producer, copies=copies)
    rg.compile_ns, rg.compile_per_device = _compiles(store, by_seq, nodes, rg.recorded)
    return rg


def _compiles(store, by_seq: dict, nodes: list, recorded: np.ndarray):
    """Compile time per node (from the run's compile markers) and, per op name, the compile
    time of one device's worth (its total over the devices it compiled on)."""
    part = np.zeros(len(nodes), dtype=np.int64)
    total: dict = defaultdict(int)
    where: dict = defaultdict(set)
    for op_seq, secs, _ in q.suggest_compiles(store):
        v = by_seq.get(op_seq, -1)
        ns = int(secs * 1e9)
        if v < 0 or ns <= 0:
            continue
        part[v] += ns
        total[nodes[v].name] += ns
        where[nodes[v].name].add(int(recorded[v]))
    return part, {name: t // max(len(where[name]), 1) for name, t in total.items()}


def _origin(b: int, info, moves, producer: dict, dev_index: dict):
    """Where an array without a recorded producer came from, seen at the op reading it:
    ``("copy", buf)`` the placer's copy of recorded array ``buf`` (the op's move names it);
    ``("moved", device)`` moved by the placer from ``device`` where an unrecorded op made it
    (e.g. ``-x``, which no hook sees); ``("here", device)`` made where the op ran, with no
    move (a library's internal op under the op's placement)."""
    for msrc, mdst, mbytes, mbuf in moves:
        if mdst == info[0] and mbytes == info[1]:
            if mbuf and mbuf in producer:
                return ("copy", mbuf)
            return ("moved", dev_index.get(msrc, -1))
    return ("here", dev_index.get(info[0], -1))


def _follow(node: int, how: str, where: int, reader: int, last_out: dict, pinned: list, color: dict) -> None:
    """Data made by an op no hook saw goes where its own inputs are: with the last recorded
    result on the device it came from (JAX runs an op where its data is), or with the op
    that read it when it was made there. Only then is it free to move with its data; an
    array from elsewhere stays where it was ("where data must be")."""
    if how == "here" and where >= 0:
        color[node] = reader
    elif how == "moved" and where in last_out:
        color[node] = last_out[where]
    else:
        pinned[node] = where


def _colors(n: int, color: dict) -> np.ndarray:
    """Colour classes (suggest.model.Graph.color) from "shares a device with" links."""
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in color.items():
        parent[find(a)] = find(b)
    out = np.full(n, -1, dtype=np.int64)
    linked = set(color) | set(color.values())
    for v in linked:
        out[v] = find(v)
    return out


def _bandwidth(store) -> float:
    """Bytes per nanosecond of explicit device-to-device puts in this run."""
    total, ns = q.suggest_put_bandwidth(store, D2D, OP_DEVICE_PUT)
    if not total or not ns or total <= 0 or ns <= 0:
        return DEFAULT_BYTES_PER_NS
    return float(total) / float(ns)


def _costs(nodes, dur, recorded, devices):
    """Per-device cost matrix: measured where it ran, estimated elsewhere (module docstring)."""
    n, k = len(nodes), len(devices)
    plat = [d.split(":")[0] for d in devices]
    unary = np.repeat(dur[:, None], k, axis=1) if n else np.zeros((0, k), dtype=np.int64)
    if len(set(plat)) <= 1 or n == 0:
        return unary, ""
    samples: dict = defaultdict(lambda: defaultdict(list))
    for v, nd in enumerate(nodes):
        samples[nd.name][plat[recorded[v]]].append(int(dur[v]))
    guessed = 0
    for v, nd in enumerate(nodes):
        here = plat[recorded[v]]
        for d in range(k):
            if plat[d] == here:
                continue
            a, b = samples[nd.name].get(here), samples[nd.name].get(plat[d])
            if a and b and np.median(a) > 0:
                unary[v, d] = int(dur[v] * float(np.median(b)) / float(np.median(a)))
            else:
                guessed += 1
    note = (f"{guessed} op/device cost(s) not measured on that platform were assumed equal to the measured one"
            if guessed else "")
    return unary, note
