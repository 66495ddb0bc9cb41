"""Queries of the upload rules (analysis/rules/uploads.py): which host array each implicit
upload (and each explicit ``device_put``: ``host_put`` markers) carried, and what the recording
knows about an array uploaded again (issue 26).

An implicit h2d's ``buf`` is the identity of the host array it carried when it is negative
(capture/jaxhooks/host_data.py); 0 in runs recorded before, and for Python scalars. The
``host_data`` markers describe the identities uploaded more than once; their JSON (and the
``host_put`` markers') is input like any stored value: a marker jaxplace could not have written
is ``DataError`` (exit 2).
"""
from __future__ import annotations

from typing import NamedTuple

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.model.events import H2D, MARKER_HOST_DATA, MARKER_HOST_PUT
from jaxplace_cli.model.untrusted import parse_value


class HostData(NamedTuple):
    """One host array uploaded more than once: ``arg`` as the called function names it,
    ``var`` the user's variable, ``made`` the site of the line that made it (0: unknown)."""

    id: int
    arg: str
    var: str
    made: int
    shape: tuple[int, ...]
    dtype: str


def implicit_uploads_with_data(store, min_bytes: int) -> list[tuple[int, int, str, int, str, int, int]]:
    """``[(seq, site, api, bytes, dst, buf, op_seq)]`` of implicit host-to-device uploads of at
    least ``min_bytes``, in seq order."""
    return store.conn.execute("SELECT seq, site, api, bytes, dst, buf, op_seq FROM transfers WHERE kind = ? "
                              "AND implicit = 1 AND bytes >= ? ORDER BY seq", (H2D, min_bytes)).fetchall()


def op_durations(store, first: int, last: int) -> dict[int, int]:
    """op seq -> host dispatch time (ns) of the ops from seq ``first`` to ``last``."""
    return {int(s): int(d) for s, d in store.conn.execute(
        "SELECT seq, dur_ns FROM ops WHERE seq >= ? AND seq <= ?", (first, last))}


_FIELDS = {"id": int, "arg": str, "var": str, "made": int, "shape": list, "dtype": str}


def _marker_docs(store, kind: str):
    """(seq, its JSON value parsed, or None when it is none) of every marker of ``kind``, in seq order."""
    for seq, value in store.conn.execute("SELECT seq, value FROM markers WHERE kind = ? ORDER BY seq", (kind,)):
        try:
            doc = parse_value(value) if isinstance(value, str) and len(value) < 100_000 else None
        except ValueError:
            doc = None
        yield seq, doc


def host_data(store) -> dict[int, HostData]:
    """id -> ``HostData`` of every ``host_data`` marker of the run."""
    out = {}
    for seq, doc in _marker_docs(store, MARKER_HOST_DATA):
        ok = isinstance(doc, dict) and all(
            isinstance(doc.get(k), t) and not isinstance(doc.get(k), bool) for k, t in _FIELDS.items())
        if not ok or not all(isinstance(n, int) and not isinstance(n, bool) for n in doc["shape"]):
            raise DataError(f"markers: the host_data marker at seq {seq} is damaged (not a JSON object "
                            "with the fields jaxplace writes); the events store was altered")
        out[doc["id"]] = HostData(doc["id"], doc["arg"][:200], doc["var"][:200], doc["made"],
                                  tuple(doc["shape"][:32]), doc["dtype"][:40])
    return out


def host_puts(store) -> dict[int, tuple[int, ...]]:
    """op seq -> the host identities (< 0) an explicit ``device_put`` uploaded (``host_put``
    markers); a marker jaxplace could not have written is ``DataError``."""
    out = {}
    for seq, doc in _marker_docs(store, MARKER_HOST_PUT):
        ids = doc.get("ids") if isinstance(doc, dict) else None
        if (not isinstance(doc.get("op") if isinstance(doc, dict) else None, int) or isinstance(doc["op"], bool)
                or not isinstance(ids, list) or not ids
                or not all(isinstance(i, int) and not isinstance(i, bool) and i < 0 for i in ids)):
            raise DataError(f"markers: the host_put marker at seq {seq} is damaged (not a JSON object "
                            "with the fields jaxplace writes); the events store was altered")
        out[doc["op"]] = tuple(ids[:1000])
    return out


def explicit_uploads(store, first: int, last: int) -> list[tuple[int, int, int, int, str]]:
    """``[(op_seq, seq, site, bytes, dst)]`` of the explicit host-to-device transfers of the ops
    from seq ``first`` to ``last``, in seq order."""
    return store.conn.execute("SELECT op_seq, seq, site, bytes, dst FROM transfers WHERE kind = ? AND implicit = 0 "
                              "AND op_seq >= ? AND op_seq <= ? ORDER BY seq", (H2D, first, last)).fetchall()
