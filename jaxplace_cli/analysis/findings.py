"""Findings: each rule is a pure function (run, config) -> list[Finding].

Every finding names the user's file:line, what it costs (count, bytes) and how to fix it.
Rules here work on jaxplace runs (they need sites and buffer identities); which rules a
foreign trace supports is decided by the caller.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..events import D2D, D2H, H2D, OP_DEVICE_PUT
from ..sizes import human_bytes
from .run import RunData

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)


@dataclass
class Finding:
    rule: str
    severity: str
    message: str
    file: str = ""
    line: int = 0
    count: int = 0
    bytes: int = 0
    fix: str = ""
    related: list[dict] = field(default_factory=list)  # other sites: {file, line, role}


@dataclass
class RuleConfig:
    min_bytes: int = 1024  # transfers smaller than this are not findings
    loop_threshold: int = 3  # a site repeating at least this often is "in a loop"
    uncommitted_threshold: int = 2


def _site(sites, sid):
    s = sites.get(sid)
    return (s.file, s.line, s.function) if s else ("?", 0, "?")


def host_sync_in_loop(run: RunData, cfg: RuleConfig) -> list[Finding]:
    """Blocking device->host reads repeated at one line: the host waits for the device each time."""
    sites = run.store.sites()
    out = []
    rows = run.store.conn.execute(
        "SELECT site, api, COUNT(*), SUM(bytes) FROM transfers WHERE kind = ? AND blocking = 1 "
        "AND implicit = 0 GROUP BY site, api HAVING COUNT(*) >= ? ORDER BY COUNT(*) DESC",
        (D2H, cfg.loop_threshold)).fetchall()
    for sid, api, n, b in rows:
        file, line, func = _site(sites, sid)
        out.append(Finding(
            "host-sync-in-loop", WARNING,
            f"{api} at {file}:{line} blocked the host on the device {n} times ({human_bytes(b)} read)",
            file, line, n, b,
            fix="keep the value on device and read it every N steps, or use "
                "jax.debug.callback / x.copy_to_host_async() to avoid waiting"))
    return out


def implicit_h2d_in_loop(run: RunData, cfg: RuleConfig) -> list[Finding]:
    """Host data (numpy) passed to jit calls/ops over and over: an upload every call."""
    site_map = run.store.sites()
    out = []
    rows = run.store.conn.execute(
        "SELECT site, api, COUNT(*), SUM(bytes) FROM transfers WHERE kind = ? AND implicit = 1 "
        "AND bytes >= ? GROUP BY site, api HAVING COUNT(*) >= ? ORDER BY SUM(bytes) DESC",
        (H2D, cfg.min_bytes, cfg.loop_threshold)).fetchall()
    for sid, api, n, b in rows:
        file, line, func = _site(site_map, sid)
        out.append(Finding(
            "implicit-h2d-in-loop", WARNING,
            f"{api}: host data uploaded implicitly {n} times at {file}:{line} "
            f"({human_bytes(b)} total, {human_bytes(b // n)} per call)",
            file, line, n, b,
            fix="jax.device_put the data once (or prefetch the next batch to the device) "
                "instead of passing numpy arrays to the call"))
    return out


def uncommitted_copy(run: RunData, cfg: RuleConfig) -> list[Finding]:
    """An uncommitted array pulled onto another device on every use (it stays where it was)."""
    site_map = run.store.sites()
    out = []
    rows = run.store.conn.execute(
        "SELECT buf, src, dst, COUNT(*), SUM(bytes), MIN(site) FROM transfers WHERE kind = ? "
        "AND implicit = 1 AND api LIKE '%(uncommitted input)' GROUP BY buf, src, dst "
        "HAVING COUNT(*) >= ? ORDER BY SUM(bytes) DESC", (D2D, cfg.uncommitted_threshold)).fetchall()
    created = {b.buf: b for b in run.store.buffers()} if rows else {}
    for buf, src, dst, n, b, sid in rows:
        file, line, func = _site(site_map, sid)
        origin = created.get(buf)
        related = []
        if origin is not None:
            of, ol, _ = _site(site_map, origin.site)
            related.append({"file": of, "line": ol, "role": "array created (uncommitted) here"})
        out.append(Finding(
            "uncommitted-copy", WARNING,
            f"an uncommitted array on {src} was copied to {dst} {n} times ({human_bytes(b)}) "
            f"at {file}:{line}; it never moves, so every use copies it again",
            file, line, n, b,
            fix=f"jax.device_put it to {dst} once (committing it there) before the loop",
            related=related))
    return out


def pingpong(run: RunData, cfg: RuleConfig) -> list[Finding]:
    """Data that leaves a device and comes back, followed along the data flow (buffer lineage).

    A buffer's *history* is the sequence of devices its data visited (consecutive repeats
    collapsed). A transfer that brings data to a device already in its history, other than
    the one it is on, is a returning leg ("round trip"). Only buffers that ever moved keep a
    history, so memory stays proportional to the moved buffers.
    """
    site_map = run.store.sites()
    xfer_by_op = defaultdict(list)
    for t in run.store.conn.execute(
            "SELECT op_seq, kind, src, dst, bytes, buf, site FROM transfers WHERE kind = ? "
            "AND op_seq != 0", (D2D,)):
        xfer_by_op[t[0]].append(t)
    if not xfer_by_op:
        return []
    hist: dict[int, tuple] = {}
    legs = defaultdict(lambda: {"count": 0, "bytes": 0, "sites": defaultdict(int)})

    def extend(h, dev):
        return h if h and h[-1] == dev else h + (dev,)

    for seq, kind, devices, in_bufs, out_bufs in run.store.conn.execute(
            "SELECT seq, kind, devices, in_bufs, out_bufs FROM ops WHERE error = '' ORDER BY seq"):
        ins = [int(x) for x in in_bufs.split(",") if x]
        outs = [int(x) for x in out_bufs.split(",") if x]
        moves = xfer_by_op.get(seq, ())
        if kind == OP_DEVICE_PUT:
            by_out = {t[5]: t for t in moves}
            for i, o in zip(ins, outs):
                t = by_out.get(o)
                if t is None:
                    if i in hist:
                        hist[o] = hist[i]
                    continue
                _, _, src, dst, nbytes, _, sid = t
                h = extend(hist.get(i, (src,)), src)
                if dst in h[:-1]:
                    _count_leg(legs, h, dst, nbytes, sid)
                hist[o] = extend(h, dst)
            continue
        if not moves and not any(i in hist for i in ins):
            continue
        moved = {t[5]: t for t in moves}
        best: tuple = ()
        for i in ins:
            h = hist.get(i, ())
            t = moved.get(i)
            if t is not None:
                _, _, src, dst, nbytes, _, sid = t
                h = extend(h or (src,), src)
                if dst in h[:-1]:
                    _count_leg(legs, h, dst, nbytes, sid)
                h = extend(h, dst)
            if len(h) > len(best):
                best = h
        if best:
            dev = devices.split(",")[0]
            for o in outs:
                hist[o] = extend(best, dev)
    out = []
    for devs, leg in sorted(legs.items(), key=lambda kv: -kv[1]["bytes"]):
        if leg["bytes"] < cfg.min_bytes:
            continue
        top = sorted(leg["sites"].items(), key=lambda kv: -kv[1])
        file, line, _ = _site(site_map, top[0][0])
        related = [{"file": _site(site_map, s)[0], "line": _site(site_map, s)[1],
                    "role": f"leg, {n} transfers"} for s, n in top]
        out.append(Finding(
            "pingpong", ERROR,
            f"data bounced between {' and '.join(devs)}: {leg['count']} round trips "
            f"({human_bytes(leg['bytes'])}) along the data flow; legs at "
            + ", ".join(f"{r['file'].rsplit('/', 1)[-1]}:{r['line']}" for r in related),
            file, line, leg["count"], leg["bytes"],
            fix="keep the chain on one device (pin the ops with --policy pin:DEVICE or a rules "
                "file), or move the data once and leave it there",
            related=related))
    return out


def _count_leg(legs, history, dst, nbytes, sid):
    key = tuple(sorted(set(history) | {dst}))
    leg = legs[key]
    leg["count"] += 1
    leg["bytes"] += max(nbytes, 0)
    leg["sites"][sid] += 1


def incompatible_devices(run: RunData, cfg: RuleConfig) -> list[Finding]:
    """Explain 'Received incompatible devices for jitted computation' with each array's origin."""
    site_map = run.store.sites()
    rows = run.store.conn.execute(
        "SELECT seq, name, devices, site, in_bufs, error FROM ops WHERE error LIKE "
        "'%incompatible devices%' ORDER BY seq").fetchall()
    if not rows:
        return []
    buffers = {b.buf: b for b in run.store.buffers()}
    out = []
    for seq, name, devices, sid, in_bufs, error in rows:
        file, line, _ = _site(site_map, sid)
        related, parts = [], []
        for x in dict.fromkeys(int(v) for v in in_bufs.split(",") if v):
            b = buffers.get(x)
            if b is None:
                continue
            bf, bl, _ = _site(site_map, b.site)
            state = "committed" if b.committed else "uncommitted"
            parts.append(f"{b.shape} {b.dtype} on {b.device} ({state}, from {bf.rsplit('/', 1)[-1]}:{bl})")
            related.append({"file": bf, "line": bl, "role": f"array on {b.device} ({state}) created here"})
        out.append(Finding(
            "incompatible-devices", ERROR,
            f"{name} at {file}:{line} failed: arguments committed to different devices: "
            + "; ".join(parts),
            file, line, 1, 0,
            fix="device_put every argument to one device first (or only commit one of them: "
                "arrays created without an explicit device follow the committed one)",
            related=related))
    return out


RULES = {
    "pingpong": pingpong,
    "host-sync-in-loop": host_sync_in_loop,
    "implicit-h2d-in-loop": implicit_h2d_in_loop,
    "uncommitted-copy": uncommitted_copy,
    "incompatible-devices": incompatible_devices,
}


def run_rules(run: RunData, cfg: RuleConfig, select: list[str] | None = None,
              ignore: list[str] | None = None) -> list[Finding]:
    chosen = [r for r in RULES if (not select or r in select) and r not in (ignore or [])]
    findings = []
    for name in chosen:
        findings.extend(RULES[name](run, cfg))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (order[f.severity], -f.bytes, -f.count))
    return findings
