"""Totals of a run: transfers per kind, top transfer sites, ops per device.

Transfers below ``min_bytes`` (Python scalar operands, 4-byte losses) are counted apart as
``small`` so they neither hide nor inflate real traffic (docs/jax-facts.md, fact 7); transfers whose
size is unknown (foreign traces) are counted apart as ``unknown_size``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from jaxplace_cli.analysis.run import RunData
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.store import queries


@dataclass
class KindTotal:
    count: int = 0
    bytes: int = 0


@dataclass
class TransferSite:
    kind: str
    file: str
    line: int
    function: str
    api: str
    implicit: bool
    blocking: bool
    count: int
    bytes: int
    routes: list[str]  # "cpu:0>cpu:1"


@dataclass
class DeviceOps:
    device: str
    count: int
    dispatch_ns: int
    top: list[tuple[str, int]]  # (op name, count), most frequent first
    device_ns: int | None = None  # device execution time from a profiler trace; None = unknown


@dataclass
class RouteTotal:
    """Transfers along one route (``host`` -> ``gpu:0``), split like the kind totals."""

    kind: str
    src: str
    dst: str
    count: int = 0  # at least min_bytes
    bytes: int = 0
    small_count: int = 0  # below min_bytes
    small_bytes: int = 0
    unknown_size: int = 0  # size not stated by the source
    blocking: int = 0  # the host waited (any size)


@dataclass
class Summary:
    min_bytes: int
    totals: dict[str, KindTotal]
    small: dict[str, KindTotal]
    unknown_size: dict[str, int]
    sites: list[TransferSite]
    ops_total: int
    ops_by_device: list[DeviceOps]
    op_errors: int
    devices: list[str] = field(default_factory=list)
    routes: list[RouteTotal] = field(default_factory=list)
    # XLA host-offload copies (foreign traces): compiled into the program, kept apart
    offload: dict[str, KindTotal] = field(default_factory=dict)
    offload_unknown_size: dict[str, int] = field(default_factory=dict)


def summarize(run: RunData, min_bytes: int = 1024, top_sites: int = 20, top_ops: int = 5) -> Summary:
    sites = run.store.sites()
    totals = {k: KindTotal() for k in TRANSFER_KINDS}
    small = {k: KindTotal() for k in TRANSFER_KINDS}
    unknown = {k: 0 for k in TRANSFER_KINDS}
    # one scan of the transfers gives both the routes and the kind totals (bench P8)
    routes = _sorted_routes(RouteTotal(*g) for g in queries.transfer_route_groups(run.store, min_bytes))
    for r in routes:
        if r.kind in totals:
            totals[r.kind].count += r.count
            totals[r.kind].bytes += r.bytes
            small[r.kind].count += r.small_count
            small[r.kind].bytes += r.small_bytes
            unknown[r.kind] += r.unknown_size
    tsites = []
    for t in queries.top_transfer_sites(run.store, min_bytes, top_sites):
        s = sites.get(t.site)
        tsites.append(TransferSite(t.kind, s.file if s else "?", s.line if s else 0,
                                   s.function if s else "?", t.api, t.implicit, t.blocking,
                                   t.count, t.bytes, t.routes))
    by_dev = []
    for d in queries.ops_per_devices(run.store):
        top = queries.top_op_names(run.store, d.devices, top_ops)
        by_dev.append(DeviceOps(d.devices, d.count, d.dur_ns or 0, [(name, c) for name, c in top]))
    ops_total = sum(d.count for d in by_dev)
    errors = queries.count_failed_ops(run.store)
    devices = run.manifest.device_names
    seen = sorted({x for d in by_dev for x in d.device.split(",") if x} - set(devices))
    return Summary(min_bytes, totals, small, unknown, tsites, ops_total, by_dev, errors,
                   devices + seen, routes)


def route_totals(rows, min_bytes: int) -> list[RouteTotal]:
    """``rows`` of (kind, src, dst, bytes, blocking) -> one RouteTotal per (kind, src, dst),
    ordered by kind, then bytes (largest first). Sizes < 0 are unknown."""
    out: dict[tuple, RouteTotal] = {}
    for kind, src, dst, nbytes, blocking in rows:
        r = out.get((kind, src, dst))
        if r is None:
            r = out[(kind, src, dst)] = RouteTotal(kind, src, dst)
        if nbytes < 0:
            r.unknown_size += 1
        elif nbytes < min_bytes:
            r.small_count += 1
            r.small_bytes += nbytes
        else:
            r.count += 1
            r.bytes += nbytes
        r.blocking += bool(blocking)
    return _sorted_routes(out.values())


def _sorted_routes(routes) -> list[RouteTotal]:
    """By kind, then bytes (largest first)."""
    order = {k: i for i, k in enumerate(TRANSFER_KINDS)}
    return sorted(routes, key=lambda r: (order.get(r.kind, 9), -r.bytes, -r.count,
                                         -r.unknown_size, r.src, r.dst))


def kind_totals(transfers, min_bytes: int):
    """In-memory TransferEvents -> (totals, small, unknown_size) by kind, as ``summarize``
    splits them (used for foreign traces, which have no store)."""
    totals = {k: KindTotal() for k in TRANSFER_KINDS}
    small = {k: KindTotal() for k in TRANSFER_KINDS}
    unknown = {k: 0 for k in TRANSFER_KINDS}
    for t in transfers:
        if t.kind not in totals:
            continue
        if t.bytes < 0:
            unknown[t.kind] += 1
        else:
            tot = small[t.kind] if t.bytes < min_bytes else totals[t.kind]
            tot.count += 1
            tot.bytes += t.bytes
    return totals, small, unknown


def transfer_kind_counts(rows) -> dict[str, tuple[int, int, int, int]]:
    """``StoreReader.transfer_totals`` rows (kind, size class, count, bytes) -> per kind
    (count, bytes, small count, unknown-size count): what ``jaxplace run``'s summary line says."""
    out = {}
    for kind in TRANSFER_KINDS:
        mine = [r for r in rows if r[0] == kind]
        out[kind] = (sum(c for _, _, c, _ in mine), sum(max(b, 0) for _, _, _, b in mine),
                     sum(c for _, cls, c, _ in mine if cls == "small"),
                     sum(c for _, cls, c, _ in mine if cls == "unknown"))
    return out
