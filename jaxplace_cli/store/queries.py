"""Read queries of the analyses: the SQL lives in the store, the analyses get rows.

Each block is headed by the analysis it serves. Functions take the reader's connection
(``StoreReader.conn``) and return iterators or lists of plain tuples (at a million rows,
NamedTuple construction would dominate the audit).
"""
from __future__ import annotations

from typing import Iterator

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
