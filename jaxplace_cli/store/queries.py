"""Named queries over a ``StoreReader``: every question the analyses ask of a run, in SQL.

The store owns the SQL so that the rest of jaxplace speaks in model types: an analysis calls
``successful_ops(store)`` and gets ``OpEvent``s, not a column list it must keep in step with
the schema. Each function takes a ``StoreReader`` (its ``conn``) and returns events
(``OpEvent``, ``TransferEvent``, ``CompileInfo``), a NamedTuple defined here, or a plain value;
row order is stated where it matters. Large scans are iterators, so a 1M-row run is never
held twice. An event query names the event's fields as its columns (``_events``), so a row is
the event even in a store with a column more (the reader also refuses those when it opens it). Where a consumer holds every row at once (the
balance rules, a budget check) the query selects only the columns it needs, into a narrower
NamedTuple (``TransferCost``), so the move to named fields costs no memory.

The queries keep the exact SQL the analyses used before they moved here (``tests/
test_golden_runs.py`` pins the audit output byte for byte), including which scans are ordered:
the tables have no index on ``seq``, so ``ORDER BY seq`` sorts, and an unordered scan returns
rows in the order they were written.

Sections, one per consumer; a new query goes into its consumer's section (the timeline's
queries are store/timeline.py).
"""
from __future__ import annotations

import json
import math
from typing import Iterator, NamedTuple

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.model.events import (
    D2D,
    D2H,
    H2D,
    MARKER_COMPILE,
    OP_JIT,
    TRANSFER_KINDS,
    TRANSFER_OPS,
    CompileInfo,
    OpEvent,
    TransferEvent,
)
from jaxplace_cli.model.untrusted import parse_value


def _events(store, cls, tail: str, params: tuple = ()) -> Iterator:
    """``SELECT`` the fields of ``cls`` (the table's columns, named) ``tail``: rows as events."""
    make = cls._make
    for row in store.conn.execute(f"SELECT {', '.join(cls._fields)} {tail}", params):
        yield make(row)


# -- analysis: summary, budgets, lineage, rules (balance, base, fwd_bwd, incompatible, placement)

class SiteTotal(NamedTuple):
    """Transfers of at least ``min_bytes`` grouped by where and how they happened."""

    site: int
    kind: str
    api: str
    implicit: bool
    blocking: bool
    count: int
    bytes: int
    routes: list[str]  # sorted "src>dst" of the group's routes


class DevicesTotal(NamedTuple):
    """Successful ops on one ``devices`` value (comma-joined, as ``OpEvent.devices``)."""

    devices: str
    count: int
    dur_ns: int | None  # summed host dispatch time (None only for a damaged column)


class TransferCost(NamedTuple):
    """What a budget counts of a transfer (seven columns: a budget check holds every one)."""

    seq: int
    kind: str
    bytes: int
    site: int
    api: str
    blocking: bool
    op_seq: int


def successful_ops(store) -> Iterator[OpEvent]:
    """Ops that did not raise, in seq order (the order the program dispatched them)."""
    return _events(store, OpEvent, "FROM ops WHERE error = '' ORDER BY seq")


def successful_ops_of_kind(store, kind: str) -> Iterator[OpEvent]:
    """Ops of one kind that did not raise, in storage order."""
    return _events(store, OpEvent, "FROM ops WHERE kind = ? AND error = ''", (kind,))


def compute_op_medians(store, skip, compiling, placed_in=None, names=None) -> dict[str, int]:
    """Per op name, the median of ``max(dur_ns, 0)`` over successful compute ops, leaving out
    ``skip`` seqs, and ``compiling`` seqs unless every call of the name compiled; with
    ``placed_in``, only ops whose ``placed`` is one of those (``names``: the names wanted, when
    known, spares the second pass). ``int(statistics.median(...))``,
    computed by SQLite's window functions: the Python fold over 845k ops took ~2 s per call
    of a 10M-event audit (bench P8)."""
    kinds = ", ".join("?" * len(TRANSFER_OPS))
    placed = f" AND placed IN ({', '.join('?' * len(placed_in))})" if placed_in is not None else ""
    out: dict[str, int] = {}
    for exclude in (compiling, ()):  # the second pass only for names whose every call compiled
        sql = ("WITH c AS (SELECT name, MAX(dur_ns, 0) AS d FROM ops WHERE error = ''"
               f" AND kind NOT IN ({kinds}){placed}"
               " AND seq NOT IN (SELECT value FROM json_each(?)) AND seq NOT IN (SELECT value FROM json_each(?))),"
               " r AS (SELECT name, d, ROW_NUMBER() OVER (PARTITION BY name ORDER BY d) AS rn,"
               " COUNT(*) OVER (PARTITION BY name) AS n FROM c)"
               " SELECT name, AVG(d) FROM r WHERE rn IN ((n + 1) / 2, (n + 2) / 2) GROUP BY name")
        args = (*TRANSFER_OPS, *(placed_in or ()), json.dumps(sorted(skip)), json.dumps(sorted(exclude)))
        for name, median in store.conn.execute(sql, args):
            out.setdefault(name, int(median))
        if not compiling or (names is not None and names <= out.keys()):
            break
    return out


def compute_op_groups(store, skip, own_in) -> tuple[list, list]:
    """(name, devices, site, count) of successful compute ops, grouped: of all of them, and of
    those whose ``placed`` is in ``own_in`` (what JAX decided), both from one scan (two were
    ~30 % of a 60k-op eager run's verdict); ``skip`` as ``compute_op_medians``."""
    kinds = ", ".join("?" * len(TRANSFER_OPS))
    rows = store.conn.execute(
        f"SELECT name, devices, site, placed IN ({', '.join('?' * len(own_in))}), COUNT(*),"
        " SUM(typeof(dur_ns) != 'integer' OR typeof(devices) != 'text')"
        f" FROM ops WHERE error = '' AND kind NOT IN ({kinds})"
        " AND seq NOT IN (SELECT value FROM json_each(?)) GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4",
        (*own_in, *TRANSFER_OPS, json.dumps(sorted(skip)))).fetchall()
    _typed(rows, "ops", "dur_ns (or devices)", "an integer (text)")
    every: list = []
    own = [(name, devices, site, count) for name, devices, site, is_own, count, _ in rows if is_own]
    for name, devices, site, _, count, _ in rows:  # a group's own and placed rows are adjacent
        if every and every[-1][:3] == (name, devices, site):
            every[-1] = (name, devices, site, every[-1][3] + count)
        else:
            every.append((name, devices, site, count))
    return every, own


def compute_op_spans(store) -> dict[str, tuple[int, int]]:
    """``devices`` -> (first, last) seq of its successful compute ops."""
    kinds = ", ".join("?" * len(TRANSFER_OPS))
    return {d: (lo, hi) for d, lo, hi in store.conn.execute(
        f"SELECT devices, MIN(seq), MAX(seq) FROM ops WHERE error = '' AND kind NOT IN ({kinds}) GROUP BY devices",
        TRANSFER_OPS) if isinstance(d, str) and isinstance(lo, int) and isinstance(hi, int)}


def committed_buffer_exists(store) -> bool:
    """Did the program commit any array to a device (``device_put(x, device)``)?"""
    return store.conn.execute("SELECT 1 FROM buffers WHERE committed != 0 LIMIT 1").fetchone() is not None


def ops_failed_with(store, text: str) -> list[OpEvent]:
    """Ops whose error contains ``text`` (SQL ``LIKE``: ASCII case-insensitive; ``text`` is
    ours, not user input, and holds no ``%``/``_``), in seq order."""
    return list(_events(store, OpEvent, "FROM ops WHERE error LIKE ? ORDER BY seq",
                        (f"%{text}%",)))


def has_backward_ops(store) -> bool:
    """Whether any successful op is marked as backward pass (``OpEvent.backward``)."""
    return store.conn.execute("SELECT 1 FROM ops WHERE backward = 1 AND error = '' LIMIT 1").fetchone() is not None


def count_failed_ops(store) -> int:
    return store.conn.execute("SELECT COUNT(*) FROM ops WHERE error != ''").fetchone()[0]


def count_placed_ops(store) -> int:
    """Ops a placement policy decided (``placed`` set, and not a fallback to JAX)."""
    return store.conn.execute("SELECT COUNT(*) FROM ops WHERE placed != '' AND placed != 'fallback'").fetchone()[0]


def ops_per_devices(store) -> list[DevicesTotal]:
    """Successful ops and their dispatch time per ``devices`` value, ordered by it."""
    return [DevicesTotal(*r) for r in store.conn.execute(
        "SELECT devices, COUNT(*), SUM(dur_ns) FROM ops WHERE error = '' GROUP BY devices ORDER BY devices")]


def top_op_names(store, devices: str, limit: int) -> list[tuple[str, int]]:
    """(op name, count) of the successful ops on ``devices``, most frequent first (ties by name)."""
    return store.conn.execute(
        "SELECT name, COUNT(*) AS c FROM ops WHERE devices = ? AND error = '' GROUP BY name "
        "ORDER BY c DESC, name LIMIT ?", (devices, limit)).fetchall()


def transfer_costs(store) -> Iterator[TransferCost]:
    """Every transfer, in seq order."""
    return _events(store, TransferCost, "FROM transfers ORDER BY seq")


def op_transfers(store, kind: str) -> Iterator[TransferEvent]:
    """Transfers of ``kind`` caused by a recorded op (``op_seq != 0``), in storage order."""
    return _events(store, TransferEvent, "FROM transfers WHERE kind = ? AND op_seq != 0", (kind,))


def _typed(rows, table: str, columns: str, what: str) -> None:
    """SQL compares and sums a text where a number belongs without a word (Python raised):
    the aggregates count such cells in their last column, and any is a damaged store."""
    if any(r[-1] for r in rows):
        raise DataError(f"{table}: a row's {columns} is not {what}; the events store was altered")


def transfer_endpoints(store) -> set[str]:
    """Every device (or ``host``) that sent or received a transfer."""
    return {d for row in store.conn.execute("SELECT DISTINCT src, dst FROM transfers") for d in row}


def policy_moves(store) -> tuple[int, int]:
    """(count, bytes) of the transfers a placement policy caused (their api says so)."""
    count, nbytes = store.conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM transfers WHERE api LIKE '%moved by policy%'").fetchone()
    return count, nbytes


def marker_values(store, kind: str) -> list[str]:
    """The values of the markers of ``kind``, in seq order."""
    return [str(v) for (v,) in store.conn.execute(
        "SELECT value FROM markers WHERE kind = ? ORDER BY seq", (kind,))]


def distinct_marker_values(store, kind: str) -> list[str]:
    """The distinct values of the markers of ``kind``, sorted (SQLite's text order)."""
    return [str(v) for (v,) in store.conn.execute(
        "SELECT DISTINCT value FROM markers WHERE kind = ? ORDER BY value", (kind,))]


# -- compile markers: one reader for every consumer (balance, recompile, suggest) --------------

_COMPILE_FIELDS = {  # JSON key -> (accepted types, default when absent)
    "fun": (str, ""),
    "secs": ((int, float), 0.0),
    "op": (str, ""),
    "op_seq": (int, 0),
    "site": (int, 0),
    "signature": (list, []),
}


def decode_compile(seq: int, value) -> CompileInfo | None:
    """A ``compile`` marker's JSON value (capture/jaxhooks/compiles.py) as a ``CompileInfo``,
    or None when it is not one: not JSON (or nested too deep to parse), not an object, or a
    field of the wrong type (a bool is not a number, ``secs`` must be finite and >= 0, the
    signature a list of strings). Absent fields take their defaults (a compile outside any
    recorded op has only ``fun`` and ``secs``); unknown fields are ignored. The marker is
    untrusted input: this never raises on its content."""
    try:
        info = parse_value(value)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(info, dict):
        return None
    got = {}
    for key, (types, default) in _COMPILE_FIELDS.items():
        v = info.get(key, default)
        if isinstance(v, bool) or not isinstance(v, types):
            return None
        got[key] = v
    try:
        secs = float(got["secs"])
    except OverflowError:  # an integer beyond any float
        return None
    sig = got["signature"]
    if not (math.isfinite(secs) and secs >= 0) or not all(isinstance(s, str) for s in sig):
        return None
    return CompileInfo(seq, got["fun"], secs, got["op"], got["op_seq"], got["site"], tuple(sig))


def compiles(store) -> list[CompileInfo]:
    """Every compile marker of the run, in seq order. A marker jaxplace could not have written
    (``decode_compile`` says which) is a damaged or hostile store: ``DataError`` (exit 2), so an
    audit never quietly drops compiles (issue 15)."""
    out = []
    for seq, value in store.conn.execute(
            "SELECT seq, value FROM markers WHERE kind = ? ORDER BY seq", (MARKER_COMPILE,)):
        info = decode_compile(seq, value)
        if info is None:
            raise DataError(f"markers: the compile marker at seq {seq} is damaged (not a JSON object "
                            "with the fields jaxplace writes); the events store was altered")
        out.append(info)
    return out
# -- ping-pong (analysis/rules/pingpong.py) and run sanity (analysis/run.py) -----------------


def d2d_moves_by_op(conn, d2d: str) -> Iterator[tuple]:
    """``(op_seq, src, dst, bytes, buf, site)`` of every device-to-device transfer an op
    caused (``op_seq != 0``)."""
    return conn.execute(
        "SELECT op_seq, src, dst, bytes, buf, site FROM transfers WHERE kind = ? AND op_seq != 0", (d2d,))


def dataflow_ops(conn) -> Iterator[tuple]:
    """``(seq, kind, devices, in_bufs, out_bufs)`` of every successful op, in order."""
    return conn.execute(
        "SELECT seq, kind, devices, in_bufs, out_bufs FROM ops WHERE error = '' ORDER BY seq")


def negative_durations(conn) -> int:
    """Ops whose dispatch time is negative: jaxplace measures it on a monotonic clock, so any
    is a damaged or hostile store. One scan (about 50 ms at a million ops)."""
    return conn.execute("SELECT COUNT(*) FROM ops WHERE dur_ns < 0").fetchone()[0]


# -- steps, recompiles, host syncs (analysis/steps.py, analysis/rules/recompile.py, analysis/rules/transfers.py) --


def step_markers(store) -> tuple[list[tuple[int, str]], list[int]]:
    """(``[(seq, value)]`` of step-begin markers, ``[seq]`` of step-end markers), in order."""
    conn = store.conn
    begins = conn.execute("SELECT seq, value FROM markers WHERE kind = 'step-begin' ORDER BY seq").fetchall()
    ends = [s for (s,) in conn.execute("SELECT seq FROM markers WHERE kind = 'step-end' ORDER BY seq")]
    return begins, ends


def last_seq(store) -> int:
    """The largest seq of any op, transfer or marker (0 in an empty run)."""
    return store.conn.execute(
        "SELECT MAX(seq) FROM (SELECT seq FROM ops UNION ALL SELECT seq FROM transfers "
        "UNION ALL SELECT seq FROM markers)").fetchone()[0] or 0


def jit_calls(store) -> list[tuple[int, str]]:
    """``[(seq, name)]`` of every jit call that did not raise, in order."""
    return store.conn.execute("SELECT seq, name FROM ops WHERE kind = ? AND error = '' ORDER BY seq",
                              (OP_JIT,)).fetchall()


def jit_ops(store) -> list[tuple[int, str, int, str]]:
    """``[(seq, name, site, devices)]`` of every jit call."""
    return store.conn.execute("SELECT seq, name, site, devices FROM ops WHERE kind = ?", (OP_JIT,)).fetchall()


def eager_ops_at_sites(store, sites: tuple) -> list[tuple[int, str]]:
    """``[(seq, out_bufs)]`` of the ops but jit calls made at ``sites``, in order (the step call's
    own line: not the calls' own out_bufs, 33 ids a call in bench/workloads/many_events.py)."""
    marks = ", ".join("?" * len(sites))
    return store.conn.execute(f"SELECT seq, out_bufs FROM ops WHERE site IN ({marks}) AND kind != ? ORDER BY seq",
                              (*sites, OP_JIT)).fetchall() if sites else []


def in_bufs_of(store, seqs: list[int]) -> dict[int, str]:
    """``{seq: in_bufs}`` of the ops ``seqs``."""
    return {seq: bufs for i in range(0, len(seqs), 500) for seq, bufs in store.conn.execute(
        f"SELECT seq, in_bufs FROM ops WHERE seq IN ({', '.join('?' * len(seqs[i:i + 500]))})", seqs[i:i + 500])}


def transfer_columns_from(store, start_seq: int) -> dict:
    """Every transfer from ``start_seq`` on, small ones included, as int64 columns ``seq``,
    ``kind`` (the index of its kind in ``TRANSFER_KINDS``, -1 for another) and ``bytes`` (an
    unknown or impossible size as 0: the transfer still counts), in table order
    (store/columns.py: a million rows at a time)."""
    from jaxplace_cli.store.columns import int_columns

    kinds = " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(TRANSFER_KINDS))
    return int_columns(store, "transfers", {"seq": "seq", "kind": f"CASE kind {kinds} ELSE -1 END",
                                            "bytes": "CASE WHEN bytes > 0 THEN bytes ELSE 0 END"},
                       "seq >= ?", (start_seq,))


def blocking_reads(store) -> list[tuple[int, int, str, int, int]]:
    """``[(seq, site, api, bytes, op_seq)]`` of explicit device-to-host reads that blocked."""
    return store.conn.execute("SELECT seq, site, api, bytes, op_seq FROM transfers WHERE kind = ? "
                              "AND blocking = 1 AND implicit = 0 ORDER BY seq", (D2H,)).fetchall()


def implicit_uploads(store, min_bytes: int) -> list[tuple[int, int, str, int, str]]:
    """``[(seq, site, api, bytes, dst)]`` of implicit host-to-device uploads of at least ``min_bytes``."""
    return store.conn.execute("SELECT seq, site, api, bytes, dst FROM transfers WHERE kind = ? "
                              "AND implicit = 1 AND bytes >= ? ORDER BY seq", (H2D, min_bytes)).fetchall()


def uncommitted_copies(store) -> list[tuple[int, int, str, str, int, int]]:
    """``[(seq, buf, src, dst, bytes, site)]`` of implicit copies of uncommitted arrays."""
    return store.conn.execute("SELECT seq, buf, src, dst, bytes, site FROM transfers WHERE kind = ? "
                              "AND implicit = 1 AND api LIKE '%(uncommitted input)' ORDER BY seq",
                              (D2D,)).fetchall()
