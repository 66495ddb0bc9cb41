"""Byte sizes: human-readable output and the size strings users write ("10 MB", "4KiB")."""
from __future__ import annotations

import re
from decimal import Decimal

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$", re.ASCII)  # ASCII digits only
MAX_SIZE = 2**63 - 1  # what SQLite and every report can hold (8 EiB); more is a typo


def _checked(n: int, value) -> int:
    if n > MAX_SIZE:
        shown = repr(value)[:40] if isinstance(value, str) else f"a {n.bit_length()}-bit number"
        raise ValueError(f"not a size: {shown} is larger than 8 EiB")
    return n


def parse_size(value) -> int:
    """``1048576``, ``"10 MB"`` (decimal), ``"4KiB"`` (binary) -> bytes; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative: {value}")
        return _checked(value, value)
    if isinstance(value, float) and value >= 0 and value.is_integer():
        return _checked(int(value), value)
    if not isinstance(value, str):
        raise ValueError(f"not a size: {value!r}")
    m = _SIZE_RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {value!r} (write e.g. 1048576, \"10 MB\" or \"4KiB\")")
    # Decimal, not float: "1.005 KB" is 1005 bytes, not 1004 (float gives 1004.99...)
    return _checked(int(Decimal(m.group(1)) * _UNITS[m.group(2).lower()]), value)


def human_bytes(n: int | None) -> str:
    """1536 -> '1.5 KiB'; unknown (None or negative) -> 'size unknown'."""
    if n is None or n < 0:
        return "size unknown"
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024.0
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}"
    return f"{n} B"


def human_ns(ns: int) -> str:
    if ns < 1_000:
        return f"{ns} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 transfer``, ``2,400 transfers``: a count and its noun, as every report writes counts."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"
