"""Which capture hot path this process runs: the C extension (``capture/_native.c``) or Python.

The extension is optional: ``pip install`` builds it where a C compiler and the Python headers
exist and installs without it elsewhere (``optional = true`` in pyproject.toml). It is used
when it imports and ``JAXPLACE_CAPTURE`` is not ``python``; the run manifest says which ran
(``capture: native|python``). Both paths append the same rows (tests/test_native_twin.py
compares them call by call on generated calls, tests/test_native.py end to end on four sample
scripts); the C one is what makes the per-op cost small (bench P2, P6).
"""
from __future__ import annotations

import os

ENV = "JAXPLACE_CAPTURE"  # "python" forces the pure-Python path; anything else: native if it loads

_state: dict = {}


def module():
    """The ``_native`` extension module, or None (missing, failed to import, or not wanted).

    It counts only with its partner ``model/_packed.c``, which packs the rows once a writer is
    attached (``Recorder.attach_writer``): both built, or the pure-Python path."""
    if "module" not in _state:
        mod = None
        if os.environ.get(ENV, "").strip().lower() != "python":
            try:
                from jaxplace_cli.capture import _native as mod
                from jaxplace_cli.model import _packed  # noqa: F401
            except Exception:  # ImportError, or a broken build (undefined symbol, ...)
                mod = None
        _state["module"] = mod
    return _state["module"]


def wrap_module():
    """The ``_wrap`` extension (the Array operator/method hooks in C), or None: missing, failed
    to import, or ``JAXPLACE_CAPTURE=python``. Independent of ``module()``: it calls whichever
    record_call the process runs."""
    if "wrap" not in _state:
        mod = None
        if os.environ.get(ENV, "").strip().lower() != "python":
            try:
                from jaxplace_cli.capture import _wrap as mod
            except Exception:  # ImportError, or a broken build
                mod = None
        _state["wrap"] = mod
    return _state["wrap"]


def kind() -> str:
    """``native`` or ``python``: what the run manifest records as ``capture``."""
    return "native" if module() is not None else "python"
