"""The HTML report's data: the timeline packed for the page's script, and escaping.

Numeric columns travel as base64 typed arrays (``{"t": "f64"|"i32"|"u16"|"u8", "d": ...}``):
on the 200k drawn events of a 1M-event run that is ~5 MB and 0.1 s, where a JSON list of
numbers took ~1 s to write and as long to parse in the browser.
"""
from __future__ import annotations

import base64
import html
import json

import numpy as np

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model import safe
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.paths import below


def esc(text) -> str:
    """Input text -> HTML text: control characters shown as ``\\x1b``, then escaped."""
    return html.escape(safe.plain(text, one_line=False), quote=True)


def script_json(data) -> str:
    """JSON that cannot end its ``<script>`` element or start a comment: ``<``, ``>`` and
    ``&`` escaped (non-ASCII too, U+2028/2029 included)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def packed(values, floats: bool = False) -> dict:
    """A column as the smallest typed array that holds it, base64."""
    if floats:
        arr = np.asarray(values, dtype=np.float64)
        return {"t": "f64", "d": base64.b64encode(arr.tobytes()).decode()}
    arr = np.asarray(values, dtype=np.int64)
    lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
    t, dt = (("u8", np.uint8) if lo >= 0 and hi < 256 else ("u16", np.uint16) if lo >= 0 and hi < 65536
             else ("i32", np.int32) if -(2**31) <= lo and hi < 2**31 else ("f64", np.float64))
    return {"t": t, "d": base64.b64encode(arr.astype(dt).tobytes()).decode()}


def _text(value, limit: int = 300) -> str:
    return safe.plain(value)[:limit]


def payload(result: AuditResult, tl) -> dict:
    """What the page's script reads (``report/assets/report.js``)."""
    info = result.steps
    stepchart = {"kinds": list(TRANSFER_KINDS),
                 "counts": {k: v.counts for k, v in result.step_transfers.items()},
                 "bytes": {k: v.bytes for k, v in result.step_transfers.items()},
                 "warmup": info.warmup if info is not None else 0,
                 "numbers": [st.number for st in info.steps] if info is not None else []}  # the script's
    if tl is None:
        return {"timeline": None, "stepchart": stepchart}
    o, t = tl.ops, tl.transfers
    labels = {f"finding:{i}": f"{f.rule}" + (f" at {below(f.file)}:{f.line}" if f.file else "")
              for i, f in enumerate(result.findings)}
    labels.update({f"site:{i}": f"{s.kind} at {below(s.file)}:{s.line}" for i, s in enumerate(result.summary.sites)})
    labels.update({f"site:s{i}": f"{s.kind} at {below(s.file)}:{s.line} (small)"
                   for i, s in enumerate(result.summary.small_sites)})
    devices = {f"finding:{i}": list(f.devices) for i, f in enumerate(result.findings)}
    d = tl.detail
    return {
        "timeline": {
            "lanes": [_text(x, 80) for x in tl.lanes], "span": max(1, tl.t1 - tl.t0),
            "steady": list(tl.steady) if tl.steady[1] > tl.steady[0] else [0, max(1, tl.t1 - tl.t0)],
            "ops": {"n": len(o["ts"]), "lane": packed(o["lane"]), "ts": packed(o["ts"], True),
                    "dur": packed(o["dur"], True), "name": packed(o["name"]), "kind": packed(o["kind"]),
                    "site": packed(o["site"]), "err": packed(o["err"]), "placed": packed(o["placed"])},
            "tr": {"n": len(t["ts"]), "ts": packed(t["ts"], True), "src": packed(t["src"]),
                   "dst": packed(t["dst"]), "kind": packed(t["kind"]), "bytes": packed(t["bytes"], True),
                   "flags": packed(t["flags"]), "site": packed(t["site"]), "api": packed(t["api"])},
            "names": [_text(x, 120) for x in tl.names], "kinds": [_text(x, 40) for x in tl.op_kinds],
            "placed": [_text(x, 80) for x in tl.op_placed], "errors": [_text(x) for x in tl.op_errors],
            "apis": [_text(x, 120) for x in tl.apis], "tkinds": [*TRANSFER_KINDS, "?"],
            "sites": [[_text(below(f)), line, _text(fn, 80)] for f, line, fn in tl.sites],
            "detail": {"complete": d.complete, "window": list(d.window) if d.window else None,
                       "ops_total": d.ops_total, "transfers_total": d.transfers_total,
                       "ops_shown": d.ops_shown, "transfers_shown": d.transfers_shown},
            "steps": {"start": packed(tl.steps.get("start", []), True), "end": packed(tl.steps.get("end", []), True),
                      "n": len(tl.steps.get("start", [])), "labels": [_text(x, 80) for x in tl.steps.get("labels", [])],
                      "method": tl.steps.get("method", ""), "warmup": tl.steps.get("warmup", 0)},
            "compiles": {"ts": packed(tl.compiles.get("ts", []), True),
                         "name": [_text(x, 120) for x in tl.compiles.get("name", [])],
                         "secs": tl.compiles.get("secs", []), "total": tl.compiles.get("total", 0)},
            "memory": [{"device": _text(m["device"], 80), "t": packed(m["t"], True), "bytes": packed(m["bytes"], True),
                        "snap_t": m["snap_t"], "snaps": [[[_text(f"{below(f)}:{line}", 160), b, n] for f, line, b, n in s]
                                                         for s in m["snaps"]]} for m in tl.memory],
            "buckets": tl.buckets, "groups": [[_text(g, 20), list(ls)] for g, ls in tl.groups],
            "moments": {k: {"ops": packed(v["ops"]), "tr": packed(v["transfers"]), "total": v["total"],
                            "label": _text(labels.get(k, k)), "devices": devices.get(k, [])}
                        for k, v in tl.moments.items()},
        },
        "stepchart": stepchart,
    }
