"""Run a callback right after a module is first imported (``import jax``), without importing it.

Used where jaxplace must hook JAX in a process it did not start the normal way — a pytest
session, a child process — and must not import JAX itself: a program that never uses JAX
must not pay for it, and a conftest may still have to set ``XLA_FLAGS`` first.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading


def after_import(name: str, callback) -> None:
    """``callback()`` once ``name`` has been imported (now, if it already is). A callback that
    raises is ignored: the import the user asked for must never fail because of jaxplace."""
    if name in sys.modules:
        _call(callback)
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


def _call(callback) -> None:
    try:
        callback()
    except Exception:  # noqa: BLE001 - see after_import
        pass


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the module's loader so that ``callback`` runs after its body; steps aside once it
    ran. Not at the first lookup: ``importlib.util.find_spec("jax")`` before ``import jax`` (an
    is-it-installed check, as transformers' ``is_flax_available`` makes) looks the module up
    without running it, and the hook that stepped aside then never saw the import (the run
    recorded nothing)."""

    def __init__(self, name: str, callback):
        self.name = name
        self.callback = callback
        self._looking = threading.local()  # our own lookup below (this thread's): the other finders answer it
        self._ran = False

    def find_spec(self, name, path=None, target=None):
        if name != self.name or self._ran or getattr(self._looking, "now", False):
            return None
        self._looking.now = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking.now = False
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_hook(module):
            exec_module(module)
            self._after_body()

        spec.loader.exec_module = exec_then_hook
        return spec

    def _after_body(self) -> None:
        if self._ran:  # a second spec of ours executed (the module imported again)
            return
        self._ran = True
        try:
            sys.meta_path.remove(self)
        except ValueError:  # a tool rebuilt sys.meta_path meanwhile
            pass
        _call(self.callback)
