"""Read queries the analyses need, over a ``StoreReader``'s connection: the store owns all SQL.

Each function takes the reader (``run.store``) and returns plain rows; the analysis that
asks decides what they mean. Blocks are grouped by the analysis they serve.
"""
from __future__ import annotations

from jaxplace_cli.model.events import D2D, D2H, H2D, OP_JIT

# -- steps, recompiles, host syncs (analysis/steps.py, rules/recompile.py, rules/transfers.py) --


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


def compile_markers(store) -> list[tuple[int, str]]:
    return store.conn.execute("SELECT seq, value FROM markers WHERE kind = 'compile' ORDER BY seq").fetchall()


def transfers_from(store, min_bytes: int, start_seq: int) -> list[tuple[int, str, int]]:
    """``[(seq, kind, bytes)]`` of transfers of at least ``min_bytes`` from ``start_seq`` on."""
    return store.conn.execute("SELECT seq, kind, bytes FROM transfers WHERE bytes >= ? AND seq >= ? "
                              "ORDER BY seq", (min_bytes, start_seq)).fetchall()


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
