"""Named queries of the device-memory analysis (issue 27, analysis/memory.py): allocations
(the ``buffers`` rows), frees, shards, and the memory markers. A store written before the
memory tables has none: ``has_memory`` is False and the audit carries no ``memory`` object."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.model.events import MARKER_MEMORY_STATS, MARKER_OOM, OP_DEVICE_PUT
from jaxplace_cli.model.untrusted import parse_value
from jaxplace_cli.store.columns import coded_columns


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
    cols, labels = coded_columns(store, "buffers", ("buf", "seq", "bytes", "site"), ("device",))
    return cols, labels["device"]


def free_columns(store) -> dict[str, np.ndarray]:
    """Every ``frees`` row as int64 columns ``buf`` and ``seq``, in table order."""
    if not has_memory(store):
        return {"buf": np.zeros(0, np.int64), "seq": np.zeros(0, np.int64)}
    return coded_columns(store, "frees", ("buf", "seq"))[0]


def shard_columns(store) -> tuple[dict[str, np.ndarray], list]:
    """Every ``shards`` row (what one device holds of a buffer over several) as columns
    ``buf``, ``bytes`` and ``device`` (an index into the labels beside), in table order."""
    if not has_memory(store):
        return {"buf": np.zeros(0, np.int64), "bytes": np.zeros(0, np.int64), "device": np.zeros(0, np.int64)}, []
    cols, labels = coded_columns(store, "shards", ("buf", "bytes"), ("device",))
    return cols, labels["device"]


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
