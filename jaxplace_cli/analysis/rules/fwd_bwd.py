"""fwd-bwd-split: the backward pass of a computation ran on another device than its forward."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from jaxplace_cli.analysis.rules.base import WARNING, Finding, container_seqs, ids, related, short, site_of
from jaxplace_cli.model.events import D2D, OP_DEVICE_GET, OP_DEVICE_PUT
from jaxplace_cli.model.sizes import human_bytes, plural
from jaxplace_cli.store import queries


def fwd_bwd_split(run, cfg) -> list[Finding]:
    """Backward ops that read forward data held on another device.

    ``ops.backward`` marks backward-pass ops (JAX's name stack holds ``transpose(...)``: eager
    primitives under ``jax.grad``/``jax.vjp`` outside jit, and ``--granularity op`` segments).
    The forward pass leaves *residuals* (inputs and intermediates) where it ran; a backward op
    on another device must copy each one it reads. So the rule follows buffers: a buffer that
    a forward op read or computed on device F (``fwd_loc``) and that a backward op on device
    B != F reads is a crossing. Its cost is the d2d transfers that carried it there: the
    backward op's own copies of it (implicit or placement moves), plus any explicit
    ``jax.device_put`` chain since it left F (counted once). Ops that create data from nothing
    (``jnp.ones``) are not forward work, so a cotangent made with them does not count.
    Findings are grouped by (forward device, backward device, backward site).
    """
    if not queries.has_backward_ops(run.store):
        return []
    sites = run.store.sites()
    groups = _walk(run)
    out = [_finding(key, g, sites) for key, g in groups.items() if g.bytes >= cfg.min_bytes]
    out.sort(key=lambda f: -f.bytes)
    return out


@dataclass
class _Group:
    """The crossings of one (forward device, backward device, backward site)."""

    count: int = 0  # d2d transfers that carried forward data to the backward device
    bytes: int = 0
    bufs: set = field(default_factory=set)  # forward arrays read across
    passes: set = field(default_factory=set)  # numbers of the backward passes involved
    fwd_sites: dict = field(default_factory=lambda: defaultdict(int))  # where the forward ran
    move_sites: dict = field(default_factory=lambda: defaultdict(int))  # where the data moved
    ops: int = 0  # backward ops that read across


class _Walk:
    """Ops in seq order: where each buffer's forward data lives, and the crossings."""

    def __init__(self, xfers: dict):
        self.xfers = xfers  # (op_seq, buf) -> [(bytes, site)] of d2d copies made for the op
        self.fwd_loc: dict[int, tuple[str, int]] = {}  # buf -> (device, site) of the forward op
        self.carried: dict[int, list] = {}  # buf -> explicit device_put moves since it left fwd_loc
        self.groups: dict[tuple, _Group] = defaultdict(_Group)
        self.passes, self.in_bwd = 0, False

    def op(self, op) -> None:
        ins, outs = ids(op.in_bufs), ids(op.out_bufs)
        if op.kind == OP_DEVICE_PUT:  # the copy carries the forward location along
            for i, o in zip(ins, outs):
                if i and i in self.fwd_loc:
                    self.fwd_loc[o] = self.fwd_loc[i]
                    self.carried[o] = self.carried.get(i, []) + self.xfers.get((op.seq, o), [])
            return
        dev = op.devices.split(",")[0]
        if not op.backward:
            self.in_bwd = False
            if ins:
                for b in ins + outs:
                    if b:
                        self.fwd_loc[b] = (dev, op.site)
                        self.carried.pop(b, None)
            return
        if not self.in_bwd:
            self.in_bwd, self.passes = True, self.passes + 1
        self._backward(op, dev, ins)

    def _backward(self, op, dev: str, ins: list[int]) -> None:
        touched = set()
        for b in dict.fromkeys(ins):
            loc = self.fwd_loc.get(b)
            if loc is None or loc[0] == dev:
                continue
            moves = self.carried.pop(b, []) + self.xfers.get((op.seq, b), [])
            key = (loc[0], dev, op.site)
            g = self.groups[key]
            g.count += len(moves)
            g.bytes += sum(m[0] for m in moves)
            g.bufs.add(b)
            g.passes.add(self.passes)
            g.fwd_sites[loc[1]] += 1
            for _, msid in moves:
                g.move_sites[msid] += 1
            touched.add(key)
        for key in touched:
            self.groups[key].ops += 1


def _walk(run) -> dict[tuple, _Group]:
    xfers = defaultdict(list)
    for t in queries.op_transfers(run.store, D2D):
        xfers[(t.op_seq, t.buf)].append((max(t.bytes, 0), t.site))
    skip = container_seqs(run)
    walk = _Walk(xfers)
    for op in queries.successful_ops(run.store):
        if op.seq not in skip and op.kind != OP_DEVICE_GET:
            walk.op(op)
    return walk.groups


def _finding(key: tuple, g: _Group, sites: dict) -> Finding:
    fdev, bdev, sid = key
    file, line, _ = site_of(sites, sid)
    rel = [related(sites, s, f"forward ran on {fdev} here") for s in
           sorted(g.fwd_sites, key=lambda s: site_of(sites, s)[:2])]
    rel += [related(sites, s, f"forward data moved {fdev}->{bdev} here ({plural(n, 'transfer')})")
            for s, n in sorted(g.move_sites.items(), key=lambda kv: -kv[1])]
    n_pass = len(g.passes)
    return Finding(
        "fwd-bwd-split", WARNING,
        f"the backward pass at {short(file, line)} ran on {bdev} but its forward ran on "
        f"{fdev}: {plural(g.ops, 'backward op')} in {plural(n_pass, 'backward pass', 'backward passes')} "
        f"read {plural(len(g.bufs), 'forward array')} (residuals) from {fdev}, {plural(g.count, 'transfer')} "
        f"({human_bytes(g.bytes)})",
        file, line, g.count, g.bytes,
        fix=f"run the backward pass where the forward ran: keep the cotangent and the "
            f"vjp function on {fdev} (no device_put of residuals), drop a `pass = "
            f"\"backward\"` placement rule, or jit value_and_grad as one function",
        related=rel, devices=[fdev, bdev])
