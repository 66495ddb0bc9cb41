"""Named queries of the call-stack tables (issue 28): the trie of user frames and, per stack
node, site and kind, what the transfers made under it moved. In a module of its own beside
``store/queries.py`` so the stacks' SQL stays in one place.

A store written before the tables (``store.schema.STACK_TABLES``), and a transfer without a
``transfer_stacks`` row (node 0), have only the transfer's site: analysis/stacks.py makes that
site a stack of one frame.
"""
from __future__ import annotations

from typing import NamedTuple

from jaxplace_cli.model.events import StackNode


class StackTotal(NamedTuple):
    """Transfers of one kind made under one stack node (0: none recorded) at one site; the
    ``steady_`` ones: those with a seq in the window asked for (the steady-state steps)."""

    node: int
    site: int
    kind: str
    count: int
    bytes: int
    steady_count: int
    steady_bytes: int


def stack_nodes(store) -> dict[int, StackNode]:
    """node -> StackNode, the whole trie (one row per distinct user frame under its parent)."""
    return {n.node: n for n in store.stack_nodes()}


def stack_totals(store, window: tuple[int, int] = (0, 0)) -> list[StackTotal]:
    """Count and bytes of the transfers per (stack node, site, kind), in that order, and of
    those with ``window[0] <= seq < window[1]``."""
    inside = "(t.seq >= ? AND t.seq < ?)"
    cols = (f"t.site, t.kind, COUNT(*), COALESCE(SUM(t.bytes), 0), COALESCE(SUM({inside}), 0), "
            f"COALESCE(SUM(CASE WHEN {inside} THEN t.bytes ELSE 0 END), 0)")
    if store.has_stacks:
        sql = (f"SELECT COALESCE(s.node, 0), {cols} FROM transfers t "
               "LEFT JOIN transfer_stacks s ON s.seq = t.seq GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")
    else:
        sql = f"SELECT 0, {cols} FROM transfers t GROUP BY 2, 3 ORDER BY 2, 3"
    return [StackTotal(*r) for r in store.conn.execute(sql, (*window, *window))]
