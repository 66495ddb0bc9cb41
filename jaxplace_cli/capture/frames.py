"""Tracebacks without jaxplace's own frames: what the user sees must read as plain python's.

One rebuild for the places that need it: the runner (the script's own exception), the
dispatch wrappers (an exception raised through a hook) and the host-callback wrappers (an
exception raised by the user's callback, which JAX logs and XLA formats into its own error);
and one scrub of traceback *text*: XLA's error for a failed host callback carries the whole
stack as text in its message.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import types
from pathlib import Path

OWN_DIR = os.path.join(str(Path(__file__).resolve().parents[1]), "")  # the jaxplace_cli package
RUNPY = "<frozen runpy>"  # runpy's frames (jaxplace runs the script through it; python does not)
# The file name given to the Python hooks' wrapper code (capture/jaxhooks/dispatch.py `wrap`): a
# warning raised inside the wrapped JAX function with a `stacklevel` counted from JAX's own frames
# must name the user's line, as under python, and CPython's warnings skip a frame whose file name
# holds both "importlib" and "_bootstrap" (they neither count it nor name it). Starting with "<",
# the recorder never takes it for the user's code.
SHIM = "<jaxplace hook: skipped by warnings like importlib._bootstrap>"
# The file of the `jaxplace` console script that started this process (note_launcher): pip's
# launcher in the venv's bin/, whose `<module>` frame lies under every frame of the script. It is
# not the user's code (capture/recorder.py's tiers), though it lies outside every library path.
LAUNCHERS: set[str] = set()

_CO_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's code


def local_items(frame) -> list:
    """``frame``'s local variables as (name, value) pairs, leaving nothing held. Reading a
    function frame's ``f_locals`` (CPython 3.11, 3.12) stores a dict of its locals on the frame,
    which kept every one of them alive until the function returned -- a ``del`` in the user's
    loop freed nothing. In a dict nobody else holds (getrefcount: ours, the frame's, its
    argument) the function's own variables are dropped again: the frame puts them back on the
    next read. Other names there (``exec`` without a namespace, ``locals()[k] = v``) live only
    there and stay. A dict the function holds itself (``d = locals()``), a module's or a class
    body's namespace, and 3.13's write-through proxy (no copy) are left as they are."""
    local = frame.f_locals
    items = list(local.items())
    code = frame.f_code
    if type(local) is dict and code.co_flags & _CO_OPTIMIZED and sys.getrefcount(local) <= 3:
        for name in (*code.co_varnames, *code.co_cellvars, *code.co_freevars):
            local.pop(name, None)
    return items


_FILE_LINE = re.compile(r'^\s*File "([^"]*)", line ')
_HEADER = "Traceback (most recent call last):"


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


def drop_own(exc: BaseException, prefixes: tuple[str, ...] = (OWN_DIR, SHIM)) -> BaseException:
    """``exc`` with its traceback ``without`` our frames; re-raise it with a bare ``raise``,
    which adds no entry for the frame doing it (CPython's RERAISE: the technique of JAX's own
    ``api_boundary``), so the frame of a wrapper around user code never shows."""
    try:
        tb = exc.__traceback__
        t = tb
        while t is not None and not t.tb_frame.f_code.co_filename.startswith(prefixes):
            t = t.tb_next
        if t is not None:
            exc.with_traceback(without(tb, prefixes))
    except Exception:  # noqa: BLE001 - never mask the user's exception
        pass
    return exc


def scrub_text(text: str, prefixes: tuple[str, ...]) -> str:
    """Traceback text (XLA formats a host callback's exception with the whole stack into its
    error message) without the entries of files under ``prefixes`` and runpy's: each such
    ``File "...", line N, in F`` line and the indented source and caret lines under it."""
    if _HEADER not in text:
        return text
    out, dropping = [], False
    for line in text.split("\n"):
        m = _FILE_LINE.match(line)
        if m is not None:
            dropping = m.group(1).startswith(prefixes) or m.group(1) == RUNPY
        elif dropping and line.startswith("    "):
            continue
        else:
            dropping = False
        if not dropping:
            out.append(line)
    return "\n".join(out)


def scrub_messages(exc: BaseException | None, prefixes: tuple[str, ...]) -> BaseException | None:
    """``exc`` whose message, and its chain's, went through ``scrub_text``. A message held
    outside ``args`` (JAX's ``JaxRuntimeError`` keeps it in C++) is scrubbed in a copy of the
    exception (same type, code, notes, traceback and chain), linked where the original was; the
    copy is what is printed. Returns the exception to print in place of ``exc``."""
    top, parent, attr, seen = exc, None, "", set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        new = _scrubbed(exc, prefixes)
        if new is not exc:
            if parent is None:
                top = new
            else:
                setattr(parent, attr, new)
        parent, exc = new, new.__cause__ or new.__context__
        attr = "__cause__" if new.__cause__ is not None else "__context__"
    return top


def _scrubbed(exc: BaseException, prefixes: tuple[str, ...]) -> BaseException:
    try:
        text = str(exc)
        if _HEADER not in text:
            return exc
        clean = scrub_text(text, prefixes)
        if clean == text:
            return exc
        if exc.args == (text,):
            exc.args = (clean,)
            if str(exc) == clean:
                return exc
        code = getattr(exc, "error_code", None)
        new = type(exc)(clean, **({"code": code} if isinstance(code, int) else {}))
        if str(new) != clean:
            return exc
        new.__cause__, new.__context__ = exc.__cause__, exc.__context__
        new.__suppress_context__ = exc.__suppress_context__
        if hasattr(exc, "__notes__"):  # JAX's note that it filtered its frames
            new.__notes__ = list(exc.__notes__)
        return new.with_traceback(exc.__traceback__)
    except Exception:  # noqa: BLE001 - an exception that will not be copied is printed as it is
        return exc


def note_launcher(frame: types.FrameType | None) -> None:
    """Remember the outermost frame's file under ``frame`` as the launcher's (called by the
    console script's entry point; under ``python -m jaxplace_cli`` it is runpy's, already own)."""
    while frame is not None and frame.f_back is not None:
        frame = frame.f_back
    if frame is not None and not frame.f_code.co_filename.startswith("<"):
        LAUNCHERS.add(frame.f_code.co_filename)


@functools.cache
def shimmed(code: types.CodeType) -> types.CodeType:
    """``code`` under the file name ``SHIM``: a frame warnings skip (one copy per code object)."""
    return code.replace(co_filename=SHIM)
