"""The queries ``suggest`` asks of a run (suggest/from_run.py, suggest/predict.py): the run as
a placement graph. The store owns all SQL (tests/test_layout.py).
"""
from __future__ import annotations

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.store.queries import compiles

# -- suggest (suggest/from_run.py, suggest/predict.py): the run as a placement graph ----------


def suggest_buffers(store) -> dict:
    """buffer id -> (device, bytes, seq, site). Plain tuples: at 100k ops, NamedTuple
    construction dominates."""
    return {b: (dev, nb, seq, site) for b, dev, nb, seq, site in
            store.conn.execute("SELECT buf, device, bytes, seq, site FROM buffers")}


def suggest_ops(store) -> list:
    """(seq, kind, name, devices, site, in_bufs, out_bufs, error, dur_ns, backward) in dispatch order."""
    return store.conn.execute("SELECT seq, kind, name, devices, site, in_bufs, out_bufs, error, dur_ns, backward "
                              "FROM ops ORDER BY seq").fetchall()


def suggest_op_devices(store) -> list[str]:
    """Every device some op ran on (a run may use devices its manifest does not list)."""
    out: dict[str, None] = {}  # first-seen order; a list's `not in` was quadratic in a crafted store's devices
    for (text,) in store.conn.execute("SELECT DISTINCT devices FROM ops"):
        out.update(dict.fromkeys(d for d in (text or "").split(",") if d))
    return list(out)


def suggest_host_transfers(store, kinds: tuple) -> list:
    """(kind, src, dst, bytes, api, site, buf, op_seq) of the host transfers, in order."""
    marks = ", ".join("?" * len(kinds))
    return store.conn.execute("SELECT kind, src, dst, bytes, api, site, buf, op_seq FROM transfers "
                              f"WHERE kind IN ({marks}) ORDER BY seq", kinds).fetchall()


def suggest_device_moves(store, kind: str) -> list:
    """(op_seq, src, dst, bytes, buf) of the device-to-device transfers an op caused."""
    return store.conn.execute("SELECT op_seq, src, dst, bytes, buf FROM transfers WHERE kind = ? AND op_seq != 0 "
                              "ORDER BY seq", (kind,)).fetchall()


def suggest_compiles(store) -> list[tuple[int, float, str]]:
    """(op_seq, seconds, op) per compile marker, read by the one validated reader
    (``queries.compiles``: unreadable markers are skipped)."""
    return [(c.op_seq, c.secs, c.op) for c in compiles(store)]


def suggest_put_bandwidth(store, d2d: str, put: str) -> tuple:
    """(bytes, dispatch ns) of the explicit device-to-device puts."""
    row = store.conn.execute(
        "SELECT SUM(t.bytes), SUM(o.dur_ns) FROM ops o JOIN "
        "(SELECT op_seq, SUM(bytes) AS bytes FROM transfers WHERE kind = ? AND implicit = 0 GROUP BY op_seq) t "
        "ON t.op_seq = o.seq WHERE o.kind = ?", (d2d, put)).fetchone()
    return row if row else (None, None)


def suggest_transfer_groups(store) -> list:
    """(kind, site, api, count, bytes) of every transfer (unknown sizes count 0 bytes)."""
    return store.conn.execute(
        "SELECT kind, site, api, COUNT(*), SUM(MAX(bytes, 0)) FROM transfers GROUP BY kind, site, api").fetchall()


def suggest_op_time(store) -> int:
    """Total dispatch time of the ops that did not fail."""
    return int(store.conn.execute("SELECT COALESCE(SUM(dur_ns), 0) FROM ops WHERE error = ''").fetchone()[0])


def check_sizes(store) -> None:
    """``suggest``'s sizes: every ``bytes`` of transfers and buffers an integer (as the audit
    requires of transfers) of at most 2**62, a buffer's not negative (the memory model indexes
    by it). 1e308 or -1 ended suggest in OverflowError or IndexError (exit 3)."""
    for table in ("transfers", "buffers"):
        bad, neg = store.conn.execute(f"SELECT SUM(typeof(bytes) != 'integer' OR bytes > {2**62}), "
                                      f"SUM(bytes < 0) FROM {table}").fetchone()
        if bad:
            raise DataError(f"{table}: {bad} rows' bytes are not an integer of at most 2**62; the events "
                            "store was altered")
        if table == "buffers" and neg:
            raise DataError(f"buffers: {neg} rows have a negative size in bytes; the events store was altered")
