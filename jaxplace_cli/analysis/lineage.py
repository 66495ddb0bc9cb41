"""Where an array came from: the op that produced each buffer, and how it got committed.

Used to explain errors and copies in the user's terms ("created at train.py:12 by jnp.ones,
committed to cpu:1 by jax.device_put at train.py:14"), which the error messages of JAX do not
say. Built from the ops table: every successful op lists the buffers it produced; a
device_put lists its inputs aligned with its outputs (0 = host data).
"""
from __future__ import annotations

from dataclasses import dataclass

from jaxplace_cli.analysis.rules.base import ids
from jaxplace_cli.model.events import OP_DEVICE_PUT, OP_JNP
from jaxplace_cli.store import queries


@dataclass(frozen=True)
class Producer:
    seq: int
    kind: str
    name: str
    site: int
    device: str
    ins: tuple[int, ...]  # for device_put: the input of this very output (0 = host data)


@dataclass(frozen=True)
class Origin:
    created_site: int
    created_by: str  # "jnp.ones", "jax.device_put of host data", "first seen"
    committed_site: int = 0  # 0 = not committed, or unknown
    committed_by: str = ""  # "jax.device_put", or "multiply (from committed inputs)"


def op_label(kind: str, name: str) -> str:
    """How the user wrote the op: ``jnp.ones``, ``jax.random.normal``, ``multiply``."""
    if kind == OP_JNP:
        return f"jax.{name}" if name.startswith(("nn.", "random.", "scipy.")) else f"jnp.{name}"
    return name


def producers(run) -> dict[int, Producer]:
    """buffer id -> the first successful op that produced it."""
    out: dict[int, Producer] = {}
    for op in queries.successful_ops(run.store):
        ins, outs = ids(op.in_bufs), ids(op.out_bufs)
        if op.kind == OP_DEVICE_PUT:
            for k, o in enumerate(outs):
                out.setdefault(o, Producer(op.seq, op.kind, op.name, op.site, op.devices,
                                           (ins[k],) if k < len(ins) else (0,)))
        elif outs:
            # one Producer shared by every output: a copy of the inputs per output would cost
            # outputs x inputs (a jit call of 1,000 parameters returning 1,000 arrays: 1M)
            p = Producer(op.seq, op.kind, op.name, op.site, op.devices.split(",")[0], tuple(ins))
            for o in outs:
                out.setdefault(o, p)
    return out


def origin(buf: int, prods: dict[int, Producer], buffers: dict, limit: int = 64) -> Origin:
    """Where ``buf``'s data was created and where (and how) it became committed.

    Created: follow device_put copies back to the op that computed the data (or the
    device_put that brought it from the host). Committed: a device_put to a device commits;
    an op's output is committed when an input on its device was, so follow that input back
    to the device_put that committed it (``via`` names the first op on the way)."""
    b = buf
    created_site, created_by = (buffers[b].site if b in buffers else 0), "first seen"
    for _ in range(limit):
        p = prods.get(b)
        if p is None:
            created_site = buffers[b].site if b in buffers else created_site
            break
        if p.kind != OP_DEVICE_PUT:
            created_site, created_by = p.site, op_label(p.kind, p.name)
            break
        if not (p.ins and p.ins[0]):
            created_site, created_by = p.site, "jax.device_put of host data"
            break
        b = p.ins[0]
    committed_site, committed_by = 0, ""
    b, via = buf, ""
    for _ in range(limit):
        info, p = buffers.get(b), prods.get(b)
        if info is None or not info.committed or p is None:
            break
        if p.kind == OP_DEVICE_PUT:
            committed_site, committed_by = p.site, "jax.device_put" + via
            break
        nxt = next((i for i in p.ins if i in buffers and buffers[i].committed
                    and buffers[i].device == p.device), 0)
        if not nxt:
            committed_site, committed_by = p.site, f"{op_label(p.kind, p.name)} (from committed inputs)"
            break
        via = via or f" (then {op_label(p.kind, p.name)})"
        b = nxt
    return Origin(created_site, created_by, committed_site, committed_by)
