"""pytest plugin: transfer budgets as test markers, like pytest-memray's ``limit_memory``.

    @pytest.mark.transfer_budget(d2h=0, h2d="1 MB", pingpong=0)
    def test_train_step(): ...

An int limits the number of transfers of that kind, a size string its bytes; also
``h2d_count``, ``h2d_bytes``, ``h2d_per_step``, ``h2d_bytes_per_step`` (and d2h, d2d),
``pingpong``, ``host_syncs_per_step``, ``recompiles``, ``fail_on``, ``min_bytes``, ``allow``
(docs/budgets.md). Device memory has its own marker, ``@pytest.mark.memory_budget(peak="9 MiB")``
(also ``peak_total``, ``growth_per_step``: the ``[memory]`` table). An unknown keyword fails the test with one line naming it. A global default comes from the ini option
``transfer_budget`` (``"d2h=0 h2d=1MB"``); a marker overrides it key by key.

Opt-in, like pytest-memray's ``--memray``: registered through the ``pytest11`` entry point, it
does nothing to JAX unless ``--jaxplace`` is given or the ini sets ``jaxplace = true`` (or a
``transfer_budget`` default, which asks for budgets on every test). Off, it only registers the
marker, checks the ini for typos and, when tests carry budgets, says in the summary that they
were not checked. On, JAX's entry points are hooked once at session start, inert (one attribute
check per call) until a test with a budget runs — so jit functions created at import time are
seen too. Works per process, hence with pytest-xdist.
"""
from __future__ import annotations

import importlib.util
import shlex

import pytest

# The pytest-free part lives in budget.py; BudgetExceeded and budget stay importable here.
from jaxplace_cli.integrations.budget import BudgetExceeded, _recording, _verdict, budget, limits_to_budget
from jaxplace_cli.report.budget import failure_text

__all__ = ["BudgetExceeded", "budget"]

MARKER = "transfer_budget"
MEMORY_MARKER = "memory_budget"  # memory_budget(peak="9 MiB", peak_total=..., growth_per_step=...): [memory]
ENABLE = "jaxplace"
_SESSION_HOOKS: list = []  # the inert capture.recording.Recording held for the process's sessions


def pytest_addoption(parser):
    group = parser.getgroup("jaxplace", "jaxplace transfer budgets")
    group.addoption("--jaxplace", action="store_true", default=False,
                    help="record each test's JAX transfers and enforce transfer_budget markers "
                         "(hooks JAX's entry points for the session)")
    parser.addini(ENABLE, "enable jaxplace's transfer budgets, as --jaxplace does", type="bool",
                  default=False)
    parser.addini(MARKER, "default transfer budget for every test, e.g. \"d2h=0 h2d=1MB\" "
                          "(enables jaxplace)", default="")


def enabled(config) -> bool:
    return bool(config.getoption("jaxplace", False) or config.getini(ENABLE) or config.getini(MARKER))


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}(**limits): fail the test when its JAX code "
                                       "exceeds these transfer limits (jaxplace; needs --jaxplace)")
    config.addinivalue_line("markers", f"{MEMORY_MARKER}(peak=, peak_total=, growth_per_step=): fail the "
                                       "test when its jax.Arrays' live device memory exceeds these sizes "
                                       "(jaxplace; needs --jaxplace)")
    ini = config.getini(MARKER)
    if ini:
        from jaxplace_cli.analysis.budgets import BudgetError

        try:
            limits_to_budget(_parse_ini(ini), "transfer_budget ini option")
        except BudgetError as exc:
            raise pytest.UsageError(str(exc)) from None
    if enabled(config):
        config.pluginmanager.register(Budgets(), "jaxplace-budgets")
    else:
        config.pluginmanager.register(Unchecked(), "jaxplace-unchecked")


class Unchecked:
    """jaxplace is off: JAX is left alone; budgets that tests ask for are named as unchecked."""

    marked = 0

    def pytest_collection_modifyitems(self, items):
        self.marked = sum(1 for item in items if item.get_closest_marker(MARKER) is not None)

    def pytest_terminal_summary(self, terminalreporter):
        if self.marked:
            terminalreporter.write_line(
                f"jaxplace: {self.marked} test(s) have transfer_budget markers that were not "
                "checked; pass --jaxplace (or set jaxplace = true in the ini) to enforce them")


class Budgets:
    """jaxplace is on: hooks installed at session start, a recording per budgeted test."""

    def pytest_sessionstart(self, session):
        """Hook JAX's entry points as soon as JAX is imported (inert until a budgeted test
        runs), so jit functions created at import time are recorded too. JAX is not imported
        here: a conftest may still have to set XLA_FLAGS first."""
        if importlib.util.find_spec("jax") is None:
            return
        from jaxplace_cli.capture.import_hook import after_import

        after_import("jax", _hold_inert_hooks)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        yield from _check_budget(item)


def _hold_inert_hooks() -> None:
    """Install the hooks inert, held until the process ends (never stopped: a budgeted test
    records into them; several sessions in one process, as pytester runs them, share one)."""
    if _SESSION_HOOKS:
        return
    from jaxplace_cli.capture.recording import Recording

    hold = Recording(inert=True)
    hold.start()
    _SESSION_HOOKS.append(hold)


def _parse_ini(text: str) -> dict:
    """``d2h=0 h2d="1 MB"`` -> {"d2h": 0, "h2d": "1 MB"}. Also accepted: commas between items,
    and the whole value quoted (``transfer_budget = "d2h=0 h2d=1MB"`` in a pytest.ini keeps
    the quotes, where pyproject.toml's TOML string drops them)."""
    t = (text or "").strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        t = t[1:-1]
    try:
        items = shlex.split(t.replace(",", " "))
    except ValueError as exc:
        raise pytest.UsageError(f"transfer_budget ini option: {exc} in {text!r}") from None
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise pytest.UsageError(f"transfer_budget ini option: {item!r} is not key=value")
        out[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return out


def _check_budget(item):
    marker = item.get_closest_marker(MARKER)
    memory = item.get_closest_marker(MEMORY_MARKER)
    ini = item.config.getini(MARKER)
    if marker is None and memory is None and not ini:
        yield
        return
    from jaxplace_cli.analysis.budgets import BudgetError

    limits = _parse_ini(ini)
    if marker is not None:
        limits.update(marker.kwargs)
    if memory is not None:  # its keys are the [memory] table's: the memory_* keywords
        limits.update({f"memory_{k}": v for k, v in memory.kwargs.items()})
    try:
        test_budget = limits_to_budget(limits, f"{item.nodeid}: transfer_budget")
    except BudgetError as exc:  # the test still runs, then fails with the one line
        outcome = yield
        if outcome.excinfo is None:
            outcome.force_exception(pytest.fail.Exception(str(exc), pytrace=False))
        return
    with _recording() as holder:
        outcome = yield
    if outcome.excinfo is not None:
        _verdict(holder, test_budget)  # clean up; the test's own failure is what matters
        return
    breaches, result = _verdict(holder, test_budget)
    if breaches:
        outcome.force_exception(pytest.fail.Exception(failure_text(breaches, result), pytrace=False))


