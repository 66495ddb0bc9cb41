"""Ping-pong: data that leaves a device and comes back, followed along the data flow."""
from __future__ import annotations

import itertools
from collections import defaultdict

from jaxplace_cli.analysis.rules.base import ERROR, Finding, ids, short, site_of
from jaxplace_cli.model.errors import DataError
from jaxplace_cli.model.events import D2D, OP_DEVICE_PUT
from jaxplace_cli.model.sizes import human_bytes, plural
from jaxplace_cli.store.queries import d2d_moves_by_op, dataflow_ops


class _Chain:
    """One array's journey: every device-to-device move of it and of what was computed from it."""

    __slots__ = ("born", "last", "moves", "returns")

    def __init__(self, born: int):
        self.born = born  # the seq of the op whose move started it
        self.last = 0  # the number of moves in the run when it last moved
        self.moves: list[tuple] = []  # (src, dst, bytes, site, returning)
        self.returns = 0


# A history is a persistent linked list, shared, never copied: a node is
# (device, length, devices visited as a bit mask, parent node); None is the empty history.
# Buffers computed from one another share their common prefix, so memory grows with the
# number of moves, not with moves x history length. Before (a tuple copied per output), an
# array bounced 16k times needed 1.06 GB to audit and 32k times 4.0 GB (issue 15).
MAX_DEVICES = 1024  # distinct device labels in d2d transfers: one host addresses at most ~16


def _extend(node, dev, bit):
    if node is not None and node[0] == dev:
        return node
    if node is None:
        return (dev, 1, bit, None)
    return (dev, node[1] + 1, node[2] | bit, node)


def _small(chains, min_bytes: int) -> str:
    """``, all under 1.0 KiB`` / ``, 200 under 1.0 KiB`` / "": the small moves are counted, and said."""
    n = sum(1 for c in chains for m in c.moves if m[2] < min_bytes)
    total = sum(len(c.moves) for c in chains)
    return "" if not n else f", {'all' if n == total else f'{n:,}'} under {human_bytes(min_bytes)}"


def pingpong(run, cfg) -> list[Finding]:
    # long: one pass over the data flow, then the findings; split, the pass's state would be threaded through
    """Data that leaves a device and comes back (A -> B -> A), along buffer lineage.

    A buffer's *history* is the sequence of devices its data visited (consecutive repeats
    collapsed); an op's outputs inherit the longest history of its inputs, a device_put's
    output that of its input. A move that brings data to a device already in its history is a
    *return*; a chain with returns is ping-pong. Alternating counters are not enough: two
    unrelated arrays moving in opposite directions are not a round trip, so this follows the
    data. Each finding lists every leg (direction and site) of the chains it covers. Only
    buffers that ever moved keep a history, and histories share their prefixes (``_extend``),
    so memory stays proportional to moves.
    """
    sites = run.store.sites()
    xfer_by_op = defaultdict(list)
    bits: dict[str, int] = {}
    for t in d2d_moves_by_op(run.store.conn, D2D):
        xfer_by_op[t[0]].append(t)
        for dev in (t[1], t[2]):
            if dev not in bits:
                if len(bits) >= MAX_DEVICES:
                    raise DataError(f"transfers: more than {MAX_DEVICES:,} distinct devices in d2d transfers")
                bits[dev] = 1 << len(bits)
    if not xfer_by_op:
        return []
    hist: dict[int, tuple] = {}  # buf -> (history node, chain)
    all_chains: list[_Chain] = []
    moves_made = itertools.count(1)

    def bit(dev):  # devices that ran ops but never took part in a d2d move: no return possible
        return bits.get(dev, 0)

    def move(h, chain, t):
        seq, src, dst, nbytes, _, sid = t
        h = _extend(h, src, bits[src])
        parent = h[3]  # the history before its last device (src)
        returning = parent is not None and bool(parent[2] & bits[dst])
        if chain is None:
            chain = _Chain(seq)
            all_chains.append(chain)
        chain.last = next(moves_made)
        chain.moves.append((src, dst, max(nbytes, 0), sid, returning))
        chain.returns += returning
        return _extend(h, dst, bits[dst]), chain

    for seq, kind, devices, in_bufs, out_bufs in dataflow_ops(run.store.conn):
        ins, outs = ids(in_bufs), ids(out_bufs)
        moves = xfer_by_op.get(seq, ())
        if kind == OP_DEVICE_PUT:  # in_bufs are aligned with out_bufs
            by_out = {t[4]: t for t in moves}
            for i, o in zip(ins, outs):
                t = by_out.get(o)
                if t is None:
                    if i in hist:
                        hist[o] = hist[i]
                    continue
                h, chain = hist.get(i, (None, None))
                hist[o] = move(h, chain, t)
            continue
        if not moves and not any(i in hist for i in ins):
            continue
        moved = {t[4]: t for t in moves}
        best: tuple = (None, None)
        best_key = (0,)
        for i in ins:
            h, chain = hist.get(i, (None, None))
            t = moved.get(i)
            if t is not None:  # the input was copied for this op; the input itself stays put
                h, chain = move(h, chain, t)
            # the longest history goes on; of two as long, a chain that came into the op (not
            # one a copy for it started), then the one that moved last (of copies made for
            # the op, the first argument's): an eager vjp's cotangent copied over for its
            # backward op, or an array put over long before, took over the chain of the
            # parameters just moved, and its legs were listed
            came = chain is not None and chain.born != seq
            key = (h[1], came, chain.last if came else 0) if h is not None else (0,)
            if key > best_key:
                best, best_key = (h, chain), key
        if best[1] is not None:
            dev = devices.split(",")[0]
            for o in outs:
                hist[o] = (_extend(best[0], dev, bit(dev)), best[1])

    by_devices: dict[tuple, list[_Chain]] = defaultdict(list)
    for c in all_chains:
        if not c.returns:
            continue
        devs = sorted({m[0] for m in c.moves} | {m[1] for m in c.moves})
        by_devices[tuple(devs)].append(c)
    out = []
    for devs, group in by_devices.items():
        legs = defaultdict(lambda: [0, 0, 0])  # (src, dst, site) -> count, bytes, returns
        n_ret = ret_bytes = n_all = all_bytes = 0
        for c in group:
            for src, dst, nbytes, sid, returning in c.moves:
                leg = legs[(src, dst, sid)]
                leg[0] += 1
                leg[1] += nbytes
                leg[2] += returning
                n_all += 1
                all_bytes += nbytes
                if returning:
                    n_ret += 1
                    ret_bytes += nbytes
        if ret_bytes < cfg.min_bytes:
            continue
        # the finding points at the leg that returned most often
        top = min(legs.items(), key=lambda kv: (-kv[1][2], -kv[1][0], kv[0][2]))
        file, line, _ = site_of(sites, top[0][2])
        rel, parts = [], []
        for (src, dst, sid), (n, b, _r) in legs.items():  # in the order the data took them
            f, ln, _ = site_of(sites, sid)
            rel.append({"file": f, "line": ln,
                        "role": f"leg {src}->{dst}: {plural(n, 'transfer')}, {human_bytes(b)}"})
            parts.append(f"{src}->{dst} at {short(f, ln)} x{n:,}")
        arrays = "1 array" if len(group) == 1 else f"{len(group)} arrays"
        # the legs add up to the transfers; the returns are those of them that came back (not
        # "round trips": across and back four times is 8 transfers, 7 of them returns)
        # (the cost, and what --max-pingpong limits): one set of numbers (issue 26)
        out.append(Finding(
            "pingpong", ERROR,
            f"data bounced between {' and '.join(devs)}: {n_ret:,} return{'s' if n_ret != 1 else ''} to a "
            f"device it had left ({human_bytes(ret_bytes)} moved back) along the data "
            f"flow of {arrays}, in {n_all:,} transfers ({human_bytes(all_bytes)}"
            f"{_small(group, cfg.min_bytes)}); legs: " + ", ".join(parts),
            file, line, n_ret, ret_bytes,
            fix="keep the chain on one device (pin the ops with --policy pin:DEVICE or a rules "
                "file), or move the data once and leave it there",
            related=rel, devices=list(devs)))
    out.sort(key=lambda f: -f.bytes)
    return out
