"""The transfers grouped per (kind, src, dst, site, api, implicit, blocking) with their sizes:
what the audit's kind totals, routes and sites are folded from (analysis/summary.py; issue 26:
one set of numbers).

SQLite's GROUP BY over seven keys sorts every row in a temporary b-tree: 12-18 s of the
10M-event audit's 37 s (4.8M transfers, bench P8). With store/_columns.c the columns are read
as arrays (the texts as indices) and grouped in numpy; without it, the GROUP BY. Both give the
same rows in the same order (the keys ascending, as SQLite's sorter returns them: text in
UTF-8 byte order, which is code point order), and both refuse a damaged store the same way:
a size that is not an integer, or sums past 64 bits, is a ``DataError``."""
from __future__ import annotations

import numpy as np

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.store.columns import coded_columns, native_reader

INTS = ("site", "implicit", "blocking", "bytes")
TEXTS = ("kind", "src", "dst", "api")
I64_MAX = (1 << 63) - 1


def transfer_groups(store, min_bytes: int) -> list[tuple]:
    """Every transfer in one scan, per (kind, src, dst, site, api, implicit, blocking): (those
    7, count and bytes of at least ``min_bytes``, count and bytes below, count of unknown size
    (negative))."""
    if native_reader(store) is None:
        return _grouped_in_sql(store, min_bytes)
    cols, texts = coded_columns(store, "transfers", INTS, TEXTS)
    nbytes = cols["bytes"]
    if not nbytes.size:
        return []
    keys = [cols["kind"], cols["src"], cols["dst"], cols["site"], cols["api"], cols["implicit"], cols["blocking"]]
    _u, first, inv = np.unique(_combined(keys), return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    big = nbytes >= min_bytes
    small = (nbytes >= 0) & ~big
    counts = [np.bincount(inv[m], minlength=first.size).tolist() for m in (big, small, nbytes < 0)]
    sums = [_exact_sums(inv, np.where(m, nbytes, 0), first.size) for m in (big, small)]
    labels = [texts["kind"], texts["src"], texts["dst"], None, texts["api"], None, None]
    rows = []
    for g, row in enumerate(first.tolist()):
        key = tuple(int(k[row]) if lab is None else lab[k[row]] for k, lab in zip(keys, labels))
        rows.append((*key, counts[0][g], sums[0][g], counts[1][g], sums[1][g], counts[2][g]))
    rows.sort(key=lambda r: r[:7])
    return rows


def _combined(keys: list) -> np.ndarray:
    """One int64 per row that is equal exactly where all ``keys`` are: each key made dense
    (0..n-1) and mixed in, the running key made dense again before it could pass 2**62."""
    out = np.zeros(keys[0].size, dtype=np.int64)
    card = 1
    for k in keys:
        lo, hi = int(k.min()), int(k.max())
        if hi - lo < (1 << 24):
            code, n = k - lo, hi - lo + 1
        else:
            u, code = np.unique(k, return_inverse=True)
            code, n = code.reshape(-1), u.size
        if card * n >= (1 << 62):
            u, out = np.unique(out, return_inverse=True)
            out, card = out.reshape(-1).astype(np.int64), u.size
        out = out * n + code
        card *= n
    return out


def _exact_sums(inv: np.ndarray, values: np.ndarray, groups: int) -> list[int]:
    """Per-group sums of int64 ``values`` as Python ints, exact: the high and low 32 bits summed
    apart (neither passes 2**63 below 2**31 rows). A sum past int64 is what
    SQLite's SUM refuses ("integer overflow"): a damaged store."""
    lo, hi = np.zeros(groups, dtype=np.int64), np.zeros(groups, dtype=np.int64)
    np.add.at(lo, inv, values & 0xFFFFFFFF)
    np.add.at(hi, inv, values >> 32)
    out = [(h << 32) + low for h, low in zip(hi.tolist(), lo.tolist())]
    if any(not -I64_MAX - 1 <= s <= I64_MAX for s in out):
        raise DataError("transfers: the sizes of one group sum past 64 bits (integer overflow); the events store was altered")
    return out


def _grouped_in_sql(store, min_bytes: int) -> list[tuple]:
    rows = store.conn.execute(
        "SELECT kind, src, dst, site, api, implicit, blocking,"
        " SUM(bytes >= ?), SUM(CASE WHEN bytes >= ? THEN bytes ELSE 0 END),"
        " SUM(bytes >= 0 AND bytes < ?), SUM(CASE WHEN bytes >= 0 AND bytes < ? THEN bytes ELSE 0 END),"
        " SUM(bytes < 0), SUM(typeof(bytes) != 'integer')"
        " FROM transfers GROUP BY kind, src, dst, site, api, implicit, blocking"
        " ORDER BY kind, src, dst, site, api, implicit, blocking", (min_bytes,) * 4).fetchall()
    if any(r[-1] for r in rows):
        raise DataError("transfers: a row's bytes is not an integer; the events store was altered")
    return [r[:-1] for r in rows]
