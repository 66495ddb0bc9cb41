"""In-process recording and the budget check of a block: what the pytest plugin and
``jaxplace_cli.budget(...)`` share. No pytest import here, so ``jaxplace_cli.budget`` works in a
plain script too.

``_recording()`` records a block's JAX work into a temporary run directory with the same
recorder and hooks as ``jaxplace run``; the audit and the budget check (budgets.py) then run on
it exactly as on a recorded script, so a test's failure sentence is the CLI's sentence.
"""
from __future__ import annotations

import functools
import itertools
import tempfile
from contextlib import contextmanager

from jaxplace_cli.model.errors import EXIT_FAILED_CHECK, JaxplaceError
from jaxplace_cli.report.budget import failure_text

KINDS = ("h2d", "d2h", "d2d")


class BudgetExceeded(JaxplaceError, AssertionError):
    """Raised by ``jaxplace_cli.budget(...)`` when the block exceeded its transfer budget.
    An AssertionError, so pytest shows it as a failed assertion."""

    exit_code = EXIT_FAILED_CHECK


# Buffer ids live on the arrays themselves; an array made in an earlier recorded test keeps
# its id, so every recorder of this process draws from one counter (far above the ids of an
# outer `jaxplace run` recorder) and ids never collide across tests.
_BUF_IDS = itertools.count(1 << 40)




def limits_to_budget(limits: dict, where: str):
    """Marker/ini keywords (model/budget_limits.py ``KEYWORDS``) -> a budgets.Budget.
    ``h2d=3`` (an int) limits the count, ``h2d="1 MB"`` (a size string) the bytes. Raises
    BudgetError naming the bad keyword, with the closest valid one when it looks like a typo (a
    typo must not disable a limit)."""
    import difflib

    from jaxplace_cli.analysis.budget_file import Budget, BudgetError, budget_from_dict
    from jaxplace_cli.model.budget_limits import KEYWORDS

    def key_of(keyword, value) -> tuple[str, str]:  # (table, key); table '' = top level
        if keyword in KINDS:
            return keyword, "count" if isinstance(value, int) else "bytes"
        return KEYWORDS[keyword].rpartition(".")[::2]

    data: dict = {}
    for keyword, value in limits.items():
        if keyword not in KINDS and keyword not in KEYWORDS:
            known = [*KINDS, *KEYWORDS]
            close = difflib.get_close_matches(keyword, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
            raise BudgetError(f"{where}: unknown keyword {keyword!r} ({hint})")
        table, name = key_of(keyword, value)
        if keyword == "allow" and isinstance(value, str):
            value = [value]  # one pattern (the ini option can only give strings)
        (data.setdefault(table, {}) if table else data)[name] = value
    b = budget_from_dict(data, where) if data else Budget(source=where)
    # the limits as the user wrote them: a failure says "limited to 10 KB", not "9.8 KiB"
    b.as_written = {}
    for keyword, value in limits.items():
        table, name = key_of(keyword, value)
        if table and isinstance(value, str):  # a size: h2d="10 KB", d2d_bytes_per_step="1MB"
            b.as_written[f"{table}.{name}"] = value
    return b


@contextmanager
def _recording():
    """Record the block's JAX work into a temporary run directory. Yields a dict that holds,
    once the block is done, ``dir`` (the run directory) and ``tmp`` (its owner: ``_verdict``
    audits the run and removes it). The hooks are held through ``capture.recording``: hooks
    already installed (inert for a pytest session, or an outer ``jaxplace run``) are shared,
    the block's recorder is active for its duration and the previous one after it."""
    from jaxplace_cli.capture.recorder import Recorder
    from jaxplace_cli.capture.recording import Recording
    from jaxplace_cli.model.manifest import Manifest
    from jaxplace_cli.store.layout import EVENTS, write_manifest
    from jaxplace_cli.store.writer import StoreWriter

    rec = Recorder()
    rec.buf_ids = _BUF_IDS  # see _BUF_IDS
    # adopt_jits: jit functions made before the hooks (module level, no pytest plugin) are
    # recorded too, when this block is the one that installs the hooks
    recording = Recording(rec, adopt_jits=True)
    recording.start()
    holder: dict = {}
    tmp = tempfile.TemporaryDirectory(prefix="jaxplace-budget-")
    try:
        yield holder
    finally:
        recording.stop()
        from pathlib import Path

        run_dir = Path(tmp.name)
        writer = StoreWriter(run_dir / EVENTS)
        writer.write(rec.drain())
        writer.close()
        write_manifest(run_dir, Manifest(status="complete", exit_code=0, argv=["pytest"]))
        holder["dir"] = run_dir
        holder["tmp"] = tmp


def _verdict(holder: dict, budget, min_bytes: int = 1024):
    from jaxplace_cli.analysis.budgets import judge_run
    from jaxplace_cli.analysis.run import open_run

    run = open_run(holder["dir"])
    try:
        result = judge_run(run, budget, budget.min_bytes or min_bytes)
        written = getattr(budget, "as_written", {})
        for b in result.budget.breaches:
            if b.rule in written:
                b.limit_text = str(written[b.rule])
        return result.budget.breaches, result
    finally:
        run.store.close()
        holder["tmp"].cleanup()


class budget:  # noqa: N801 - a function to its users: jaxplace_cli.budget(d2h=0)
    """``with jaxplace_cli.budget(d2h=0): ...`` — raise BudgetExceeded if the block exceeds it.

    A class, not a ``@contextmanager``: a failure then shows the user's ``with`` line and the
    breach, not two contextlib frames and jaxplace's own (``__tracebackhide__`` hides this
    ``__exit__`` from pytest's traceback)."""

    def __init__(self, **limits):
        self._limits = limits
        self._budget = limits_to_budget(limits, "jaxplace_cli.budget()")  # BudgetError: a bad keyword
        self._cm = None

    def __call__(self, func):
        """``@jaxplace_cli.budget(d2h=0)`` on a function: each call is checked on its own."""

        @functools.wraps(func)
        def checked(*args, **kwargs):
            __tracebackhide__ = True  # noqa: F841 - read by pytest
            with type(self)(**self._limits):
                return func(*args, **kwargs)

        return checked

    def __enter__(self):
        self._cm = _recording()
        self._holder = self._cm.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        __tracebackhide__ = True  # noqa: F841 - read by pytest
        cm, self._cm = self._cm, None
        cm.__exit__(None, None, None)  # stop recording, write the store
        if exc_type is not None:  # the block's own failure is what matters
            self._holder["tmp"].cleanup()
            return False
        breaches, result = _verdict(self._holder, self._budget)
        if breaches:
            raise BudgetExceeded(failure_text(breaches, result))
        return False
