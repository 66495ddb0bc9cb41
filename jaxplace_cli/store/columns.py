"""Integer and text columns of a table read in bulk, as numpy arrays.

Through store/_columns.c where it is built (a store opened immutable: its ``uri``): one SELECT,
each value from SQLite's C API into an int64 array, texts as indices into their distinct values;
the 10M-event audit's buffers (4.8M rows, five columns) in 2.3 s and 219 MB (bench/README.md,
round 22). Otherwise each column of up to ``CHUNK`` rows comes back from SQLite as one
comma-joined string that numpy parses (``group_concat`` + ``np.fromstring``): on a 479k-row
table ~0.2 s where ``fetchall`` of the rows as tuples took ~0.45 s, but 7.9 s and 415 MB for
those 4.8M buffers. All the aggregates of one query step over the same rows in the same order,
so the columns stay aligned. A value that is not an integer (a damaged store) is a
``DataError``, never a silently wrong number."""
from __future__ import annotations

import warnings

import numpy as np

from jaxplace_cli.model.errors import DataError

try:
    from jaxplace_cli.store._columns import read as NATIVE
except ImportError:  # not built (no compiler or no sqlite3.h): the group_concat path
    NATIVE = None

CHUNK = 1 << 20  # rows a query: a column's string stays ~10 MB whatever the table's size


def int_columns(store, table: str, exprs: dict[str, str], where: str = "1", params: tuple = (),
                expr_params: tuple = ()) -> dict:
    """``{name: int64 array}`` of the integer SQL expressions ``exprs`` (jaxplace's own, never
    input; ``expr_params`` bound to their ``?`` in order) over the rows of ``table`` where
    ``where`` holds, in rowid order: in C in one query, else ``CHUNK`` rows a query (keyed on
    the last rowid read: a table with sparse rowids costs no more)."""
    names = list(exprs)
    if native_reader(store) is not None:
        return _read_native(store, table, exprs, (), where, (*expr_params, *params))[0]
    parts: dict[str, list] = {name: [] for name in names}
    bad = " OR ".join(f"typeof(c{i}) != 'integer'" for i in range(len(names)))
    cols = ", ".join(f"group_concat(c{i})" for i in range(len(names)))
    inner = ", ".join(f"{exprs[name]} AS c{i}" for i, name in enumerate(names))
    sql = {op: (f"SELECT count(*), max(r), coalesce(sum({bad}), 0), {cols} FROM "
                f"(SELECT rowid AS r, {inner} FROM {table} WHERE rowid {op} ? AND ({where}) ORDER BY rowid LIMIT ?)")
           for op in (">=", ">")}
    last, first = -(1 << 63), True  # the first query includes rowid -2**63 (``>=``), the later ones start past ``last``
    while True:
        row = store.conn.execute(sql[">=" if first else ">"], (*expr_params, last, *params, CHUNK)).fetchone()
        first = False
        n, top, nbad = row[0], row[1], row[2]
        if nbad:
            raise DataError(f"{table}: {nbad} rows hold a value that is not an integer in {', '.join(names)}")
        for i, name in enumerate(names):
            parts[name].append(parse_ints(row[3 + i], n, f"{table}.{name}"))
        if n < CHUNK:
            break
        last = top
    return {name: np.concatenate(p) for name, p in parts.items()}


# More distinct texts than this are mapped row by row in Python, not by one CASE in the query
# (the path without store/_columns.c).
MAX_CASE_LABELS = 500


def coded_columns(store, table: str, ints: tuple, texts: tuple = (), where: str = "1",
                  params: tuple = ()) -> tuple[dict, dict]:
    """``({column: int64 array}, {text column: its distinct values})`` of every row of ``table``
    where ``where`` holds, in rowid order: the columns ``ints`` as they are, each of ``texts`` as
    indices into its values. A NULL or a value of the other type (a damaged store) is a
    ``DataError``. With store/_columns.c one scan (the texts interned in C, in the order first
    seen); without it a DISTINCT query per text column and a CASE (or past ``MAX_CASE_LABELS``
    values, a Python map of each row)."""
    if native_reader(store) is not None:
        return _read_native(store, table, {c: c for c in ints}, texts, where, tuple(params))
    exprs, expr_params, labels, mapped = {c: c for c in ints}, [], {}, []
    for text in texts:
        labels[text] = [r[0] for r in store.conn.execute(f"SELECT DISTINCT {text} FROM {table} WHERE ({where})", params)]
        if len(labels[text]) <= MAX_CASE_LABELS:
            expr_params += labels[text]
            whens = " ".join(f"WHEN ? THEN {i}" for i in range(len(labels[text])))
            exprs[text] = f"CASE {text} {whens} ELSE -1 END" if labels[text] else "-1"
        else:
            mapped.append(text)
    out = int_columns(store, table, exprs, where, params, tuple(expr_params))
    n = len(next(iter(out.values()))) if out else 0
    for text in mapped:
        index = {v: i for i, v in enumerate(labels[text])}
        out[text] = np.fromiter((index[r[0]] for r in store.conn.execute(
            f"SELECT {text} FROM {table} WHERE ({where}) ORDER BY rowid", params)), np.int64, n)
    for text in texts:
        if None in labels[text] or any(not isinstance(v, str) for v in labels[text]):
            raise DataError(f"{table}.{text} holds a NULL or a value that is not a text")
    return out, labels


def _read_native(store, table: str, ints: dict, texts: tuple, where: str, params: tuple) -> tuple[dict, dict]:
    """``int_columns``/``coded_columns`` through store/_columns.c: the integer expressions ``ints``
    and the text columns ``texts`` in one SELECT; any value of another type is a ``DataError``."""
    names = (*ints, *texts)
    cols, values, bad = NATIVE(store.uri, f"SELECT {', '.join((*ints.values(), *texts))} FROM {table} "
                                          f"WHERE ({where}) ORDER BY rowid", params, "i" * len(ints) + "t" * len(texts))
    if any(bad):
        n = sum(bad)
        raise DataError(f"{table}: {n} value{'' if n == 1 else 's'} NULL or of the wrong type in {', '.join(names)}")
    return ({name: np.frombuffer(c, dtype=np.int64) for name, c in zip(names, cols)},
            dict(zip(texts, values[len(ints):])))


def native_reader(store):
    """store/_columns.c's ``read`` for a store opened from a file (its ``uri``), else None: the
    extension is optional, and the group_concat path above reads the same columns."""
    if NATIVE is None or not isinstance(getattr(store, "uri", None), str):
        return None
    return NATIVE


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
