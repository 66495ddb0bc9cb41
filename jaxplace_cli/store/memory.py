"""Named queries of the device-memory analysis (issue 27, analysis/memory.py): allocations
(the ``buffers`` rows), frees, shards, and the memory markers. A store written before the
memory tables has none: ``has_memory`` is False and the audit carries no ``memory`` object."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.model.events import MARKER_MEMORY_STATS, MARKER_OOM, OP_DEVICE_PUT
from jaxplace_cli.model.untrusted import parse_value
from jaxplace_cli.store.columns import int_columns


class FailedAllocation(NamedTuple):
    seq: int
    site: int
    device: str
    bytes: int
    error: str


def has_memory(store) -> bool:
    return bool(getattr(store, "has_memory", False))


def buffer_columns(store) -> tuple[dict[str, np.ndarray], list]:
    """Every ``buffers`` row as columns, in table order: ``buf``, ``seq``, ``bytes``, ``site``
    (int64) and ``device`` (an index into the labels returned beside)."""
    return _columns(store, "buffers", ("buf", "seq", "bytes", "site"))


def free_columns(store) -> dict[str, np.ndarray]:
    """Every ``frees`` row as int64 columns ``buf`` and ``seq``, in table order."""
    if not has_memory(store):
        return {"buf": np.zeros(0, np.int64), "seq": np.zeros(0, np.int64)}
    return _columns(store, "frees", ("buf", "seq"), text=None)[0]


def shard_columns(store) -> tuple[dict[str, np.ndarray], list]:
    """Every ``shards`` row (what one device holds of a buffer over several) as columns
    ``buf``, ``bytes`` and ``device`` (an index into the labels beside), in table order."""
    if not has_memory(store):
        return {"buf": np.zeros(0, np.int64), "bytes": np.zeros(0, np.int64), "device": np.zeros(0, np.int64)}, []
    return _columns(store, "shards", ("buf", "bytes"))


# More device labels than this are mapped row by row in Python, not by one CASE in the query.
MAX_CASE_LABELS = 500


def _columns(store, table: str, ints: tuple, text: str | None = "device") -> tuple[dict, list]:
    """``ints`` (and ``text`` as indices into its distinct values) of every row of ``table``.

    Read as store/columns.py reads (comma-joined strings numpy parses, a million rows a query),
    with ``text`` mapped to indices in the same query. A value that is not an integer (a
    damaged store) is a ``DataError``, not a silently wrong number."""
    labels: list = []
    exprs = {c: c for c in ints}
    params: list = []
    if text is not None:
        labels = [r[0] for r in store.conn.execute(f"SELECT DISTINCT {text} FROM {table}")]
        if len(labels) <= MAX_CASE_LABELS:
            params = labels
            whens = " ".join(f"WHEN ? THEN {i}" for i in range(len(labels)))
            exprs[text] = f"CASE {text} {whens} ELSE -1 END" if labels else "-1"
    # a million rows a query (store/columns.py): one query's strings for 4.8M buffers made the
    # 10M-event audit's peak 1.4 GB (P8)
    out = int_columns(store, table, exprs, expr_params=tuple(params))
    n = len(next(iter(out.values()))) if out else 0
    if text is not None:
        if len(labels) <= MAX_CASE_LABELS:
            codes = out[text]
        else:
            index = {v: i for i, v in enumerate(labels)}
            codes = np.fromiter((index[r[0]] for r in store.conn.execute(f"SELECT {text} FROM {table}")),
                                np.int64, n)
        if codes.size and codes.min() < 0:
            raise DataError(f"{table}.{text} holds a NULL")
        out[text] = codes
    return out, labels


def _json_markers(store, kind: str) -> list[tuple[int, dict]]:
    out = []
    for seq, value in store.conn.execute("SELECT seq, value FROM markers WHERE kind = ? ORDER BY seq", (kind,)):
        try:
            v = parse_value(value)
        except (TypeError, ValueError):
            raise DataError(f"markers: a {kind} marker holds {str(value)[:40]!r}, not JSON") from None
        if not isinstance(v, dict):
            raise DataError(f"markers: a {kind} marker is not a JSON object")
        out.append((seq, v))
    return out


def failed_allocations(store) -> list[FailedAllocation]:
    """Allocations that raised RESOURCE_EXHAUSTED (capture/memory.py's ``oom`` markers)."""
    out = []
    for seq, v in _json_markers(store, MARKER_OOM):
        site, device, nbytes, error = v.get("site", 0), v.get("device", "?"), v.get("bytes", -1), v.get("error", "")
        if type(site) is not int or type(nbytes) is not int or not isinstance(device, str) or not isinstance(error, str):
            raise DataError("markers: an oom marker's fields have the wrong types")
        out.append(FailedAllocation(seq, site, device, nbytes, error))
    return out


def memory_stats(store) -> dict[str, tuple[int, int]]:
    """device -> (bytes_in_use, peak_bytes_in_use) of the last ``memory_stats`` sample."""
    out: dict[str, tuple[int, int]] = {}
    for _seq, v in memory_stats_samples(store):
        out.update(v)
    return out


def memory_stats_samples(store) -> list[tuple[int, dict[str, tuple[int, int]]]]:
    """Every ``memory_stats`` sample (at each step's end and at the end), by seq:
    (seq, device -> (bytes_in_use, peak_bytes_in_use))."""
    out = []
    for seq, v in _json_markers(store, MARKER_MEMORY_STATS):
        sample = {}
        for dev, pair in v.items():
            if not (isinstance(pair, list) and len(pair) == 2 and all(type(x) is int for x in pair)):
                raise DataError("markers: a memory_stats marker's values are not [int, int]")
            sample[dev] = (pair[0], pair[1])
        out.append((seq, sample))
    return out


def device_put_pairs(store) -> list[tuple[str, str]]:
    """(in_bufs, out_bufs) of every successful ``device_put`` op: a result on its argument's
    own device shares the argument's device buffer (JAX aliases it: no copy is made)."""
    return store.conn.execute("SELECT in_bufs, out_bufs FROM ops WHERE kind = ? AND error = '' "
                              "ORDER BY seq", (OP_DEVICE_PUT,)).fetchall()
