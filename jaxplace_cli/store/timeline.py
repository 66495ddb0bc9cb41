"""The timeline's queries (analysis/timeline.py: the HTML report and the Perfetto export).

Every query takes the reader's connection and returns plain tuples; analyses (``analysis/``)
turn them into results. Lists of ids travel as one JSON parameter (``json_each``), never as
SQL text, so no value from a run can change a query.
"""
from __future__ import annotations

import json
import sqlite3

# ----------------------------------------------------------------------------------------
# timeline (issue 16): analysis/timeline.py — the HTML report's and the Perfetto export's
# lanes, events, level-of-detail buckets and the moments of findings.
# ----------------------------------------------------------------------------------------

OP_COLUMNS = "seq, ts_ns, dur_ns, thread, kind, name, devices, site, error, placed"
TRANSFER_COLUMNS = "seq, ts_ns, thread, kind, src, dst, bytes, implicit, blocking, api, site"


def timeline_span(conn: sqlite3.Connection) -> tuple[int, int]:
    """(first, last) nanosecond of the run's events: ops' ends included."""
    row = conn.execute(
        "SELECT MIN(a), MAX(b) FROM ("
        " SELECT MIN(ts_ns) AS a, MAX(ts_ns + MAX(dur_ns, 0)) AS b FROM ops"
        " UNION ALL SELECT MIN(ts_ns), MAX(ts_ns) FROM transfers"
        " UNION ALL SELECT MIN(ts_ns), MAX(ts_ns) FROM markers)").fetchone()
    return (row[0] or 0, row[1] or 0)


def timeline_counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """(ops, transfers) in the store."""
    return (conn.execute("SELECT COUNT(*) FROM ops").fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM transfers").fetchone()[0])


def op_rows(conn: sqlite3.Connection, seq_from: int | None = None, seq_to: int | None = None):
    """Ops (``OP_COLUMNS``) with ``seq_from <= seq < seq_to`` (all when None), by seq."""
    lo, hi = (seq_from if seq_from is not None else -(2**62)), (seq_to if seq_to is not None else 2**62)
    return conn.execute(f"SELECT {OP_COLUMNS} FROM ops WHERE seq >= ? AND seq < ? ORDER BY seq", (lo, hi))


def transfer_rows(conn: sqlite3.Connection, seq_from: int | None = None, seq_to: int | None = None):
    """Transfers (``TRANSFER_COLUMNS``) with ``seq_from <= seq < seq_to`` (all when None), by seq."""
    lo, hi = (seq_from if seq_from is not None else -(2**62)), (seq_to if seq_to is not None else 2**62)
    return conn.execute(f"SELECT {TRANSFER_COLUMNS} FROM transfers WHERE seq >= ? AND seq < ? ORDER BY seq",
                        (lo, hi))


def op_rows_by_seq(conn: sqlite3.Connection, seqs) -> list:
    return conn.execute(f"SELECT {OP_COLUMNS} FROM ops WHERE seq IN (SELECT value FROM json_each(?)) "
                        "ORDER BY seq", (json.dumps(list(seqs)),)).fetchall()


def transfer_rows_by_seq(conn: sqlite3.Connection, seqs) -> list:
    return conn.execute(f"SELECT {TRANSFER_COLUMNS} FROM transfers WHERE seq IN "
                        "(SELECT value FROM json_each(?)) ORDER BY seq", (json.dumps(list(seqs)),)).fetchall()


def op_seqs_at_sites(conn: sqlite3.Connection, sites) -> list[int]:
    """Seqs of the ops at these site ids, in order."""
    return [s for (s,) in conn.execute("SELECT seq FROM ops WHERE site IN (SELECT value FROM json_each(?)) "
                                       "ORDER BY seq", (json.dumps(sorted(sites)),))]


def transfer_seqs_at_sites(conn: sqlite3.Connection, sites, min_bytes: int = 0, kind: str | None = None,
                           api: str | None = None, implicit: bool | None = None,
                           blocking: bool | None = None) -> list[int]:
    """Seqs of the transfers of at least ``min_bytes`` at these site ids (and of this kind, api,
    implicit and blocking state, where given), in order."""
    where, params = ["site IN (SELECT value FROM json_each(?))", "bytes >= ?"], [json.dumps(sorted(sites)), min_bytes]
    for col, value in (("kind", kind), ("api", api), ("implicit", implicit), ("blocking", blocking)):
        if value is not None:
            where.append(f"{col} = ?")
            params.append(int(value) if isinstance(value, bool) else value)
    return [s for (s,) in conn.execute(f"SELECT seq FROM transfers WHERE {' AND '.join(where)} ORDER BY seq",
                                       params)]


def seq_times(conn: sqlite3.Connection, seqs) -> dict[int, int]:
    """seq -> ts_ns for those of ``seqs`` that are an op, a marker or a transfer (tables asked
    in that order, each only for the seqs still unknown: steps start at ops or markers)."""
    want, out = set(seqs), {}
    for table in ("ops", "markers", "transfers"):
        if not want:
            break
        rows = conn.execute(f"SELECT seq, ts_ns FROM {table} WHERE seq IN (SELECT value FROM json_each(?))",
                            (json.dumps(sorted(want)),)).fetchall()
        out.update(rows)
        want.difference_update(s for s, _ in rows)
    return out


def last_time_before(conn: sqlite3.Connection, seq: int) -> int | None:
    """ts_ns of the last op or transfer before ``seq`` (its end, for an op)."""
    row = conn.execute("SELECT MAX(t) FROM (SELECT MAX(ts_ns + MAX(dur_ns, 0)) AS t FROM ops WHERE seq < ? "
                       "UNION ALL SELECT MAX(ts_ns) FROM transfers WHERE seq < ?)", (seq, seq)).fetchone()
    return row[0] if row else None


def op_buckets(conn: sqlite3.Connection, t0: int, width: int, n: int) -> list[tuple]:
    """(devices, bucket, ops, dispatch ns) per device set and time bucket of ``width`` ns."""
    return conn.execute("SELECT devices, MIN(MAX((ts_ns - ?) / ?, 0), ?) AS b, COUNT(*), SUM(MAX(dur_ns, 0)) "
                        "FROM ops GROUP BY devices, b", (t0, width, n - 1)).fetchall()


def transfer_buckets(conn: sqlite3.Connection, t0: int, width: int, n: int) -> list[tuple]:
    """(src, dst, kind, bucket, transfers, bytes) per route and time bucket (sizes < 0 count 0)."""
    return conn.execute("SELECT src, dst, kind, MIN(MAX((ts_ns - ?) / ?, 0), ?) AS b, COUNT(*), "
                        "SUM(MAX(bytes, 0)) FROM transfers GROUP BY src, dst, kind, b",
                        (t0, width, n - 1)).fetchall()


def marker_rows(conn: sqlite3.Connection, kind: str, limit: int) -> list[tuple]:
    """(seq, ts_ns, value) of the first ``limit`` markers of ``kind``."""
    return conn.execute("SELECT seq, ts_ns, value FROM markers WHERE kind = ? ORDER BY seq LIMIT ?",
                        (kind, limit)).fetchall()


def marker_count(conn: sqlite3.Connection, kind: str) -> int:
    return conn.execute("SELECT COUNT(*) FROM markers WHERE kind = ?", (kind,)).fetchone()[0]
