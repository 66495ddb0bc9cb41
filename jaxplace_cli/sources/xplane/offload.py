"""XLA host offload: ``copy-start`` ops that move arrays to or from host memory.

They appear on a device's ``XLA Ops`` line (TPU, and GPU programs compiled with host offload),
with the HLO text as the event name: ``%copy-start.1 = (f32[5,1024]{...S(5)}, ...) copy-start(
f32[5,1024]{1,0} %param)``. The memory space ``S(5)`` is host memory: an operand there is a
prefetch to the device (h2d), a result there an offload from it (d2h). They are compiled into
the program rather than requested, so they are kept apart in ``TraceData.offload_transfers``;
their size is the logical size of the HLO shape (tile padding not included), and notes say so.
"""
from __future__ import annotations

import re
from collections import Counter

from jaxplace_cli.model.events import D2H, H2D, HOST
from jaxplace_cli.model.sizes import plural

HOST_MEMORY_SPACE = "S(5)"  # XLA's host memory space in layouts
_SHAPE_RE = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\]")
_DTYPE_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1, "f8e4m3b11fnuz": 1, "f8e3m4": 1, "f8e8m0fnu": 1,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
}


def hlo_bytes(shape_text: str) -> int:
    """Logical byte size of an HLO array shape such as ``f32[5,1024]{1,0:T(8,128)S(5)}``;
    -1 for anything else (tuples, dynamic dims, sub-byte types)."""
    m = _SHAPE_RE.match(shape_text)
    size = _DTYPE_BYTES.get(m.group(1)) if m else None
    if size is None:
        return -1
    n = size
    for d in m.group(2).split(","):
        if d:
            # "²".isdigit() is True, int("²") fails; a dimension of thousands of digits (a hostile
            # trace) cost quadratic time and overflowed later: a size past 2**62 is unknown
            if not (d.isascii() and d.isdigit()) or len(d) > 19:
                return -1
            n *= int(d)
            if n > 2**62:
                return -1
    return n


def host_offload_copy(name: str):
    """(kind, bytes, api) for an HLO ``copy-start`` to/from host memory, else None."""
    lhs, sep, operand = name.partition(" copy-start(")
    if not sep:
        return None
    operand = operand.split(" %", 1)[0]  # 'f32[5,1024]{1,0:T(8,128)S(5)} %param)' -> the shape
    if HOST_MEMORY_SPACE in operand:
        kind = H2D  # operand lives in host memory: prefetch to the device
    elif HOST_MEMORY_SPACE in lhs:
        kind = D2H  # result lives in host memory: offload from the device
    else:
        return None
    inst = lhs.split(" =", 1)[0].lstrip("%")
    return kind, hlo_bytes(operand), f"xla-host-offload:{inst}"


def offload_copies(events) -> list[tuple]:
    """``events``: (device label, HLO text, start_ns) of the ``copy-start`` candidates. Plain
    tuples (ts, kind, src, dst, bytes, api), since there can be thousands; one parse per
    distinct (device, text), as a program repeats the same copies every step."""
    out = []
    cache = {}
    for label, n, ts in events:
        key = (label, n)
        info = cache.get(key, False)
        if info is False:
            info = host_offload_copy(n)
            if info is not None:
                kind, nbytes, api = info
                src, dst = (HOST, label) if kind == H2D else (label, HOST)
                info = (kind, src, dst, nbytes, api)
            cache[key] = info
        if info is not None:
            out.append((int(ts),) + info)
    return out


def describe(offload: list[tuple], notes: list[str], source: list[str]) -> None:
    """What the offload copies are and what their sizes mean, for notes and source."""
    if not offload:
        return
    kc = Counter(o[1] for o in offload)
    unknown = sum(1 for o in offload if o[4] < 0)
    notes.append(
        f"{plural(len(offload), 'XLA host-offload copy', 'XLA host-offload copies')} "
        f"(copy-start to/from memory space S(5)): {kc[H2D]} h2d, {kc[D2H]} d2h; bytes "
        "are the logical size of the HLO shape (tile padding not included)"
        + (f", {unknown} too complex to size (bytes=-1)" if unknown else "")
        + "; listed in offload_transfers, not in transfers")
    source.append(f"HLO host-offload copies: copy-start with S(5) x{len(offload)}")
