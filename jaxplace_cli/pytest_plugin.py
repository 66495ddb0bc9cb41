"""pytest plugin: transfer budgets as test markers, like pytest-memray's ``limit_memory``.

    @pytest.mark.transfer_budget(d2h=0, h2d="1 MB", pingpong=0)
    def test_train_step(): ...

An int limits the number of transfers of that kind, a size string its bytes; also
``h2d_per_step``/``d2h_per_step``/``d2d_per_step``, ``pingpong``, ``host_syncs_per_step``,
``recompiles``, ``fail_on``, ``min_bytes``. A global default comes from the ini option
``transfer_budget`` (``"d2h=0 h2d=1MB"``); a marker overrides it key by key.

Registered through the ``pytest11`` entry point, so it is active without flags. JAX's entry
points are hooked once at session start, inert (one attribute check per call) until a test
with a budget runs — so jit functions created at import time are seen too. Works per process,
hence with pytest-xdist.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import shlex
import sys
import tempfile
from contextlib import contextmanager

import pytest

MARKER = "transfer_budget"
KINDS = ("h2d", "d2h", "d2d")


class BudgetExceeded(AssertionError):
    """Raised by ``jaxplace_cli.budget(...)`` when the block exceeded its transfer budget."""


def pytest_addoption(parser):
    parser.addini(MARKER, "default transfer budget for every test, e.g. \"d2h=0 h2d=1MB\"", default="")


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}(**limits): fail the test when its JAX code "
                                       "exceeds these transfer limits (jaxplace)")


def pytest_sessionstart(session):
    """Hook JAX's entry points as soon as JAX is imported (inert until a budgeted test runs),
    so jit functions created at import time are recorded too. JAX is not imported here: a
    conftest may still have to set XLA_FLAGS first."""
    if importlib.util.find_spec("jax") is None:
        return
    if "jax" in sys.modules:
        _install_inert()
    else:
        sys.meta_path.insert(0, _AfterJaxImport())


_INSTALLED: list = []


def _install_inert() -> None:
    from .hooks import install, state
    from .recorder import Recorder

    if state.active.rec is None and not _INSTALLED:
        install(Recorder())  # patch the entry points ...
        state.active.rec = None  # ... but record nothing until a budgeted test runs
        _INSTALLED.append(True)


class _AfterJaxImport(importlib.abc.MetaPathFinder):
    """Runs ``_install_inert`` right after ``import jax`` finishes, then removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "jax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_hook(module):
            exec_module(module)
            try:
                _install_inert()
            except Exception:  # never break `import jax`; budgets then install lazily
                pass

        spec.loader.exec_module = exec_then_hook
        return spec


def _parse_ini(text: str) -> dict:
    out = {}
    for item in shlex.split(text or ""):
        key, sep, value = item.partition("=")
        if not sep:
            raise pytest.UsageError(f"transfer_budget ini option: {item!r} is not key=value")
        out[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return out


def limits_to_budget(limits: dict, where: str):
    """Marker/ini keywords -> a budget.Budget (BudgetError names the bad keyword)."""
    from .budgets import Budget, BudgetError, budget_from_dict

    data: dict = {}
    for key, value in limits.items():
        if key in KINDS:
            data.setdefault(key, {})["count" if isinstance(value, int) else "bytes"] = value
        elif key.endswith(("_per_step", "_bytes")) and key.split("_", 1)[0] in KINDS:
            kind, rest = key.split("_", 1)
            data.setdefault(kind, {})[{"per_step": "count_per_step", "bytes": "bytes",
                                       "bytes_per_step": "bytes_per_step"}.get(rest, rest)] = value
        elif key == "host_syncs":
            data["host_syncs_per_step"] = value
        else:
            data[key] = value
    try:
        return budget_from_dict(data, where) if data else Budget(source=where)
    except BudgetError as exc:
        raise pytest.UsageError(str(exc)) from None


@contextmanager
def _recording():
    """Record the block's JAX work into a temporary run directory; yields a callable that
    returns (AuditResult, RunData) once the block is done."""
    from .hooks import install, state
    from .recorder import Recorder
    from .rundir import EVENTS, MANIFEST_SCHEMA_VERSION, write_manifest
    from .store import StoreWriter

    rec = Recorder()
    installed_here = False
    if _INSTALLED or state.active.rec is not None:
        previous = state.active.rec
        state.active.rec = rec
    else:
        previous = None
        install(rec)
        installed_here = True
    holder: dict = {}
    tmp = tempfile.TemporaryDirectory(prefix="jaxplace-budget-")
    try:
        yield holder
    finally:
        if installed_here:
            from .hooks import uninstall

            uninstall()
        else:
            state.active.rec = previous
        from pathlib import Path

        run_dir = Path(tmp.name)
        writer = StoreWriter(run_dir / EVENTS)
        writer.write(rec.drain())
        writer.close()
        write_manifest(run_dir, {"schema_version": MANIFEST_SCHEMA_VERSION, "status": "complete",
                                 "exit_code": 0, "argv": ["pytest"], "policy": "default"})
        holder["dir"] = run_dir
        holder["tmp"] = tmp


def _verdict(holder: dict, budget, min_bytes: int = 1024):
    from .analysis import audit_run
    from .analysis.findings import RuleConfig
    from .analysis.run import open_run
    from .budgets import check

    run = open_run(holder["dir"])
    try:
        result = audit_run(run, RuleConfig(min_bytes=budget.min_bytes or min_bytes))
        return check(result, run, budget, budget.min_bytes or min_bytes), result
    finally:
        run.store.close()
        holder["tmp"].cleanup()


def _failure_text(breaches, result) -> str:
    from .sizes import human_bytes

    lines = [breaches_sentence(b) for b in breaches]
    out = "\n".join(lines)
    if result.summary.sites:
        out += "\n\nTop transfer sites:\n" + "\n".join(
            f"  {s.file}:{s.line} {s.kind} x{s.count} {human_bytes(s.bytes)} {s.api}"
            for s in result.summary.sites[:5])
    return out


def breaches_sentence(b) -> str:
    """pytest-memray style: 'Test was limited to 0 d2h transfers but did 3 (...)'."""
    if b.rule in ("h2d.count", "d2h.count", "d2d.count"):
        return f"Test was limited to {b.limit} {b.rule.split('.')[0]} transfers but did {b.actual}"
    return "Test " + b.message


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker(MARKER)
    ini = item.config.getini(MARKER)
    if marker is None and not ini:
        yield
        return
    limits = _parse_ini(ini)
    if marker is not None:
        limits.update(marker.kwargs)
    budget = limits_to_budget(limits, f"{item.nodeid} transfer_budget")
    with _recording() as holder:
        outcome = yield
    if outcome.excinfo is not None:
        _verdict(holder, budget)  # clean up; the test's own failure is what matters
        return
    breaches, result = _verdict(holder, budget)
    if breaches:
        outcome.force_exception(pytest.fail.Exception(_failure_text(breaches, result), pytrace=False))


@contextmanager
def budget(**limits):
    """``with jaxplace_cli.budget(d2h=0): ...`` — raise BudgetExceeded if the block exceeds it."""
    b = limits_to_budget(limits, "jaxplace_cli.budget()")
    with _recording() as holder:
        yield
    breaches, result = _verdict(holder, b)
    if breaches:
        raise BudgetExceeded(_failure_text(breaches, result))
