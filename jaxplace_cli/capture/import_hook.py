"""Run a callback right after a module is first imported (``import jax``), without importing it.

Used where jaxplace must hook JAX in a process it did not start the normal way — a pytest
session, a child process — and must not import JAX itself: a program that never uses JAX
must not pay for it, and a conftest may still have to set ``XLA_FLAGS`` first.
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
import threading

from jaxplace_cli.capture import native


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
        self._at = None  # where it stood in sys.meta_path while a body of its module runs

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
        # The body runs with this finder out of sys.meta_path (its ~900 imports in JAX's case
        # would each call find_spec here) and, where the extension is built, with no Python
        # frame of ours around it (capture/_native.c call_around): its frames then sit where
        # they would without the hook, and cross CPython's stack chunks as they would
        # (capture/runner.py _on_python_stack; `import jax` behind two hooks: 612 -> 336 chunks
        # unmapped, python's 334)
        around = getattr(native.module(), "call_around", None)
        if around is not None:
            spec.loader.exec_module = functools.partial(around, exec_module, self._before_body,
                                                        self._after_body, self._body_failed)
            return spec

        def exec_then_hook(module):
            self._before_body()
            try:
                exec_module(module)
            except BaseException:
                self._body_failed()
                raise
            self._after_body()

        spec.loader.exec_module = exec_then_hook
        return spec

    def _before_body(self) -> None:
        self._at = self._step_aside()

    def _body_failed(self) -> None:
        """The body raised: watched again, where it was (the import may be tried again)."""
        if self._at is not None and not self._ran and self._where() is None:
            sys.meta_path.insert(min(self._at, len(sys.meta_path)), self)

    def _where(self) -> int | None:
        """This finder's index in ``sys.meta_path`` by identity: ``list.index`` and ``in`` would
        call the other finders' ``__eq__`` (user code) as the script's import runs."""
        return next((i for i, f in enumerate(sys.meta_path) if f is self), None)

    def _step_aside(self) -> int | None:
        """Leave ``sys.meta_path``; where it was, or None (a tool rebuilt it meanwhile)."""
        at = self._where()
        if at is not None:
            del sys.meta_path[at]
        return at

    def _after_body(self) -> None:
        if self._ran:  # a second spec of ours executed (the module imported again)
            return
        self._ran = True
        self._step_aside()
        _call(self.callback)
