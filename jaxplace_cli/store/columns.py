"""Integer columns of a table read in bulk: each column of up to ``CHUNK`` rows comes back from
SQLite as one comma-joined string that numpy parses (``group_concat`` + ``np.fromstring``). On a
479k-row table that is ~0.2 s where ``fetchall`` of the rows as tuples took ~0.45 s and splitting
the tuples into columns 0.1-0.3 s more (measured on 2 cores). All the aggregates of one query
step over the same rows in the same order, so the columns stay aligned. A value that is not an
integer (a damaged store) is a ``DataError``, never a silently wrong number."""
from __future__ import annotations

import warnings

import numpy as np

from jaxplace_cli.model.errors import DataError

CHUNK = 1 << 20  # rows a query: a column's string stays ~10 MB whatever the table's size


def int_columns(store, table: str, exprs: dict[str, str], where: str = "1", params: tuple = (),
                expr_params: tuple = ()) -> dict:
    """``{name: int64 array}`` of the integer SQL expressions ``exprs`` (jaxplace's own, never
    input; ``expr_params`` bound to their ``?`` in order) over the rows of ``table`` where
    ``where`` holds, in rowid order, ``CHUNK`` rows a query (keyed on the last rowid read: a
    table with sparse rowids costs no more)."""
    names = list(exprs)
    parts: dict[str, list] = {name: [] for name in names}
    bad = " OR ".join(f"typeof(c{i}) != 'integer'" for i in range(len(names)))
    cols = ", ".join(f"group_concat(c{i})" for i in range(len(names)))
    inner = ", ".join(f"{exprs[name]} AS c{i}" for i, name in enumerate(names))
    sql = (f"SELECT count(*), max(r), coalesce(sum({bad}), 0), {cols} FROM "
           f"(SELECT rowid AS r, {inner} FROM {table} WHERE rowid > ? AND ({where}) ORDER BY rowid LIMIT ?)")
    last = -(1 << 63)
    while True:
        row = store.conn.execute(sql, (*expr_params, last, *params, CHUNK)).fetchone()
        n, top, nbad = row[0], row[1], row[2]
        if nbad:
            raise DataError(f"{table}: {nbad} rows hold a value that is not an integer in {', '.join(names)}")
        for i, name in enumerate(names):
            parts[name].append(parse_ints(row[3 + i], n, f"{table}.{name}"))
        if n < CHUNK:
            break
        last = top
    return {name: np.concatenate(p) for name, p in parts.items()}


def event_sites(store, skip: tuple = ()):
    """(``seq``, ``site``) int64 columns of every op and transfer, in seq order (the steps' cuts),
    but those made at the sites ``skip`` (the step call's own line: 9 in 10 events of a call with
    32 scalar arguments, which say nothing of where an iteration starts)."""
    site = "CASE WHEN typeof(site) = 'integer' THEN site ELSE 0 END"  # a damaged one: no site, as elsewhere
    where = f"site NOT IN ({', '.join('?' * len(skip))})" if skip else "1"
    ops, moves = (int_columns(store, t, {"seq": "seq", "site": site}, where, tuple(skip)) for t in ("ops", "transfers"))
    seq, site = np.concatenate([ops["seq"], moves["seq"]]), np.concatenate([ops["site"], moves["site"]])
    order = np.argsort(seq, kind="stable")
    return seq[order], site[order]


def transfer_stack_columns(store):
    """(``seq``, ``node``) int64 columns of the transfers made under a recorded call stack."""
    cols = int_columns(store, "transfer_stacks", {"seq": "seq", "node": "CASE WHEN typeof(node) = 'integer' THEN node ELSE 0 END"})
    return cols["seq"], cols["node"]


def parse_ints(joined, n: int, what: str) -> np.ndarray:
    """The ``n`` integers of a ``group_concat`` string (None: no row)."""
    if not n:
        return np.zeros(0, np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # text numpy cannot read to its end: an error, not a cut
        try:
            out = np.fromstring(joined or "", dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning):
            out = None
    if out is None or out.size != n:
        raise DataError(f"{what}: the column does not read back as {n} integers")
    return out
