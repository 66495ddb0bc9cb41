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
    """Transfers of one kind made under one stack node (0: none recorded) at one site."""

    node: int
    site: int
    kind: str
    count: int
    bytes: int


def stack_nodes(store) -> dict[int, StackNode]:
    """node -> StackNode, the whole trie (one row per distinct user frame under its parent)."""
    return {n.node: n for n in store.stack_nodes()}


def stack_totals(store) -> list[StackTotal]:
    """Count and bytes of the transfers per (stack node, site, kind), in that order."""
    if store.has_stacks:
        sql = ("SELECT COALESCE(s.node, 0), t.site, t.kind, COUNT(*), COALESCE(SUM(t.bytes), 0) "
               "FROM transfers t LEFT JOIN transfer_stacks s ON s.seq = t.seq "
               "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")
    else:
        sql = ("SELECT 0, site, kind, COUNT(*), COALESCE(SUM(bytes), 0) FROM transfers "
               "GROUP BY 2, 3 ORDER BY 2, 3")
    return [StackTotal(*r) for r in store.conn.execute(sql)]
