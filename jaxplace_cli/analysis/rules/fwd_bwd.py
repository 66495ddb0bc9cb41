"""fwd-bwd-split: the backward pass of a computation ran on another device than its forward."""
from __future__ import annotations

from collections import defaultdict

from jaxplace_cli.analysis.rules.base import WARNING, Finding, container_seqs, ids, related, short, site_of
from jaxplace_cli.model.events import D2D, OP_DEVICE_GET, OP_DEVICE_PUT
from jaxplace_cli.model.sizes import human_bytes


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
    conn = run.store.conn
    if not conn.execute("SELECT 1 FROM ops WHERE backward = 1 AND error = '' LIMIT 1").fetchone():
        return []
    sites = run.store.sites()
    xfers = defaultdict(list)  # (op_seq, buf) -> [(bytes, site)]
    for op_seq, buf, nbytes, sid in conn.execute(
            "SELECT op_seq, buf, bytes, site FROM transfers WHERE kind = ? AND op_seq != 0", (D2D,)):
        xfers[(op_seq, buf)].append((max(nbytes, 0), sid))
    skip = container_seqs(run)
    fwd_loc: dict[int, tuple[str, int]] = {}  # buf -> (device, site) of the forward op
    carried: dict[int, list] = {}  # buf -> explicit device_put moves since it left fwd_loc
    groups = defaultdict(lambda: {"count": 0, "bytes": 0, "bufs": set(), "passes": set(),
                                  "fwd_sites": defaultdict(int), "move_sites": defaultdict(int),
                                  "ops": 0})
    passes, in_bwd = 0, False
    for seq, kind, devices, sid, in_bufs, out_bufs, backward in conn.execute(
            "SELECT seq, kind, devices, site, in_bufs, out_bufs, backward FROM ops "
            "WHERE error = '' ORDER BY seq"):
        if seq in skip or kind == OP_DEVICE_GET:
            continue
        ins, outs = ids(in_bufs), ids(out_bufs)
        if kind == OP_DEVICE_PUT:  # the copy carries the forward location along
            for i, o in zip(ins, outs):
                if i and i in fwd_loc:
                    fwd_loc[o] = fwd_loc[i]
                    carried[o] = carried.get(i, []) + xfers.get((seq, o), [])
            continue
        dev = devices.split(",")[0]
        if not backward:
            in_bwd = False
            if ins:
                for b in ins + outs:
                    if b:
                        fwd_loc[b] = (dev, sid)
                        carried.pop(b, None)
            continue
        if not in_bwd:
            in_bwd, passes = True, passes + 1
        touched = set()
        for b in dict.fromkeys(ins):
            loc = fwd_loc.get(b)
            if loc is None or loc[0] == dev:
                continue
            moves = carried.pop(b, []) + xfers.get((seq, b), [])
            key = (loc[0], dev, sid)
            g = groups[key]
            g["count"] += len(moves)
            g["bytes"] += sum(m[0] for m in moves)
            g["bufs"].add(b)
            g["passes"].add(passes)
            g["fwd_sites"][loc[1]] += 1
            for _, msid in moves:
                g["move_sites"][msid] += 1
            touched.add(key)
        for key in touched:
            groups[key]["ops"] += 1
    out = []
    for (fdev, bdev, sid), g in groups.items():
        if g["bytes"] < cfg.min_bytes:
            continue
        file, line, _ = site_of(sites, sid)
        rel = [related(sites, s, f"forward ran on {fdev} here") for s in
               sorted(g["fwd_sites"], key=lambda s: site_of(sites, s)[:2])]
        rel += [related(sites, s, f"forward data moved {fdev}->{bdev} here ({n} transfers)")
                for s, n in sorted(g["move_sites"].items(), key=lambda kv: -kv[1])]
        n_pass = len(g["passes"])
        out.append(Finding(
            "fwd-bwd-split", WARNING,
            f"the backward pass at {short(file, line)} ran on {bdev} but its forward ran on "
            f"{fdev}: {g['ops']} backward ops in {n_pass} backward pass"
            f"{'es' if n_pass != 1 else ''} read {len(g['bufs'])} forward arrays "
            f"(residuals) from {fdev}, {g['count']} transfers ({human_bytes(g['bytes'])})",
            file, line, g["count"], g["bytes"],
            fix=f"run the backward pass where the forward ran: keep the cotangent and the "
                f"vjp function on {fdev} (no device_put of residuals), drop a `pass = "
                f"\"backward\"` placement rule, or jit value_and_grad as one function",
            related=rel, devices=[fdev, bdev]))
    out.sort(key=lambda f: -f.bytes)
    return out
