"""Tracebacks without jaxplace's own frames: what the user sees must read as plain python's.

One rebuild for the two places that need it: the runner (the script's own exception) and the
dispatch wrappers (an exception raised through a hook).
"""
from __future__ import annotations

import types


def without(tb: types.TracebackType | None, prefixes: tuple[str, ...]) -> types.TracebackType | None:
    """``tb`` without the entries whose code lives under ``prefixes`` (None if none is left).

    Each kept entry keeps its own ``tb_lasti``. Its line stays lazy where CPython left it lazy:
    on Python 3.11 ``tb_lineno`` is None for an instruction without a line (a Ctrl-C can land on
    one), and ``TracebackType`` takes only an int there, so such an entry is rebuilt with -1,
    as CPython builds it. Before, that None ended a Ctrl-C'd run in an internal error (exit 3)."""
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(prefixes):
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for t in reversed(kept):
        lineno = t.tb_lineno
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, -1 if lineno is None else lineno)
    return new
