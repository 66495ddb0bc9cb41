"""In-process recording and the budget check of a block: what the pytest plugin and
``jaxplace_cli.budget(...)`` share. No pytest import here, so ``jaxplace_cli.budget`` works in a
plain script too.

``_recording()`` records a block's JAX work into a temporary run directory with the same
recorder and hooks as ``jaxplace run``; the audit and the budget check (budgets.py) then run on
it exactly as on a recorded script, so a test's failure sentence is the CLI's sentence.
"""
from __future__ import annotations

import itertools
import tempfile
from contextlib import contextmanager

from .sizes import human_bytes

KINDS = ("h2d", "d2h", "d2d")


class BudgetExceeded(AssertionError):
    """Raised by ``jaxplace_cli.budget(...)`` when the block exceeded its transfer budget."""


_INSTALLED: list = []  # hooks installed inert for the whole session (pytest_sessionstart)
# Buffer ids live on the arrays themselves; an array made in an earlier recorded test keeps
# its id, so every recorder of this process draws from one counter (far above the ids of an
# outer `jaxplace run` recorder) and ids never collide across tests.
_BUF_IDS = itertools.count(1 << 40)


def _install_inert() -> None:
    from .hooks import install, state
    from .recorder import Recorder

    if state.active.rec is None and not _INSTALLED:
        install(Recorder())  # patch the entry points ...
        state.active.rec = None  # ... but record nothing until a budgeted test runs
        _INSTALLED.append(True)


# Marker / ini / context-manager keywords -> (budget table, key); None table = top level.
_KIND_SUFFIX = {"count": "count", "bytes": "bytes", "per_step": "count_per_step",
                "bytes_per_step": "bytes_per_step"}
KEYWORDS = {f"{k}_{suffix}": (k, key) for k in KINDS for suffix, key in _KIND_SUFFIX.items()}
KEYWORDS.update({k: (None, k) for k in ("pingpong", "host_syncs_per_step", "recompiles",
                                        "fail_on", "min_bytes", "allow")})
KEYWORDS["host_syncs"] = (None, "host_syncs_per_step")  # kept: an early spelling


def limits_to_budget(limits: dict, where: str):
    """Marker/ini keywords -> a budgets.Budget. ``h2d=3`` (an int) limits the count,
    ``h2d="1 MB"`` (a size string) the bytes. Raises BudgetError naming the bad keyword, with
    the closest valid one when it looks like a typo (a typo must not disable a limit)."""
    import difflib

    from .budgets import Budget, BudgetError, budget_from_dict

    data: dict = {}
    for key, value in limits.items():
        if key in KINDS:
            data.setdefault(key, {})["count" if isinstance(value, int) else "bytes"] = value
            continue
        if key not in KEYWORDS:
            known = [*KINDS, *KEYWORDS]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
            raise BudgetError(f"{where}: unknown keyword {key!r} ({hint})")
        table, name = KEYWORDS[key]
        if key == "allow" and isinstance(value, str):
            value = [value]  # one pattern (the ini option can only give strings)
        if table is None:
            data[name] = value
        else:
            data.setdefault(table, {})[name] = value
    return budget_from_dict(data, where) if data else Budget(source=where)


@contextmanager
def _recording():
    """Record the block's JAX work into a temporary run directory. Yields a dict that holds,
    once the block is done, ``dir`` (the run directory) and ``tmp`` (its owner: ``_verdict``
    audits the run and removes it). Hooks already installed (inert for a pytest session, or
    an outer ``jaxplace run``) are borrowed: only the active recorder is swapped and restored."""
    from .hooks import install, state
    from .recorder import Recorder
    from .rundir import EVENTS, MANIFEST_SCHEMA_VERSION, write_manifest
    from .store import StoreWriter

    rec = Recorder()
    rec._buf_ids = _BUF_IDS  # see _BUF_IDS
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
    lines = [breaches_sentence(b) for b in breaches]
    out = "\n".join(lines)
    if result.summary.sites:
        out += "\n\nTop transfer sites:\n" + "\n".join(
            f"  {_rel(s.file)}:{s.line} {s.kind} x{s.count} {human_bytes(s.bytes)} {s.api}"
            for s in result.summary.sites[:5])
    return out


def _rel(path: str) -> str:
    """The path relative to the working directory when below it (short failure text)."""
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def breaches_sentence(b) -> str:
    """pytest-memray style: 'Test was limited to 0 d2h transfers but did 3 (...)'.

    Whole-test limits are said about the test; per-step and finding breaches already name
    their step or rule, so their sentence is kept as the audit says it."""
    where = b.message[b.message.index(" ("):] if b.message.endswith(")") and " (" in b.message else ""
    kind, _, key = b.rule.partition(".")
    if key == "count":
        return f"Test was limited to {b.limit} {kind} transfers but did {b.actual}{where}"
    if key == "bytes":
        return (f"Test was limited to {human_bytes(b.limit)} of {kind} transfers but moved "
                f"{human_bytes(b.actual)}{where}")
    if b.rule == "pingpong":
        return f"Test was limited to {b.limit} ping-pong round trips but did {b.actual}{where}"
    if b.rule == "recompiles":
        return f"Test was limited to {b.limit} recompiles but did {b.actual}{where}"
    return b.message


@contextmanager
def budget(**limits):
    """``with jaxplace_cli.budget(d2h=0): ...`` — raise BudgetExceeded if the block exceeds it."""
    b = limits_to_budget(limits, "jaxplace_cli.budget()")  # BudgetError: a bad keyword
    with _recording() as holder:
        yield
    breaches, result = _verdict(holder, b)
    if breaches:
        raise BudgetExceeded(_failure_text(breaches, result))
