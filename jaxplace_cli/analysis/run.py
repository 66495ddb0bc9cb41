"""Open what ``audit`` was pointed at: a jaxplace run directory (manifest + events store).

Foreign traces (a ``jax.profiler`` log dir or a single ``.xplane.pb``) are read by
``sources/xplane/``; ``classify_input`` decides which reader applies and turns every failure into one
``InputError`` line (exit code 2).
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from jaxplace_cli.model.errors import DataError, JaxplaceError
from jaxplace_cli.model.manifest import Manifest
from jaxplace_cli.sources.xplane import TraceError, holds_trace
from jaxplace_cli.store.layout import EVENTS, RunDirError, is_run_dir, read_manifest
from jaxplace_cli.store.queries import negative_durations
from jaxplace_cli.store.reader import StoreError, StoreReader


class InputError(JaxplaceError):
    """What audit was given cannot be read; the message is one line saying what to do."""


@dataclass
class RunData:
    path: Path
    manifest: Manifest
    store: StoreReader

    @property
    def complete(self) -> bool:
        return self.manifest.complete


def open_run(path: Path) -> RunData:
    path = Path(path)
    try:
        manifest = read_manifest(path)
        store = StoreReader(path / EVENTS)
    except (RunDirError, StoreError) as exc:
        raise InputError(str(exc)) from None
    try:
        negative = negative_durations(store.conn)
    except sqlite3.DatabaseError:
        negative = 0  # a store damaged past its header: the analysis says so when it reads it
    if negative:
        store.close()
        raise InputError(f"{path / EVENTS}: ops.dur_ns holds {negative:,} negative durations (jaxplace "
                         "measures them on a monotonic clock); the store is damaged or was not "
                         "written by jaxplace")
    return RunData(path, manifest, store)


def classify_input(path: Path) -> str:
    """'run' | 'trace' — or InputError when it is neither."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; pass a run directory made by `jaxplace run`, "
                         "a jax.profiler log dir or a .xplane.pb file")
    if path.is_dir() and is_run_dir(path):
        return "run"
    if path.is_file() and path.name.endswith(".xplane.pb"):
        return "trace"
    if path.is_dir():
        try:
            if holds_trace(path):  # bounded: no recursion, MAX_WALK_DEPTH levels at most
                return "trace"
        except TraceError as exc:
            raise InputError(str(exc)) from None
        raise InputError(f"{path} is not a jaxplace run (no run.json) and holds no .xplane.pb "
                         "trace; pass a directory made by `jaxplace run` or a jax.profiler log dir")
    raise InputError(f"{path} is not a jaxplace run directory or a .xplane.pb trace file")


# What damaged data makes an analysis raise (a text in an integer column, a marker of an
# unexpected shape); the same exceptions from sound data are jaxplace's own bugs.
DATA_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError)


def analyse(run: RunData, fn):
    """``fn()``, with a failure that the store's data explains turned into one ``InputError``
    line (values of the wrong type in a column: a hand-edited or damaged file). When the data
    is sound the original exception propagates: it is a bug (or, for the solvers, a
    ``ValueError`` saying a request cannot be met). The type scan runs only on failure."""
    try:
        return fn()
    except DataError as exc:  # a value jaxplace could not have written, found by the analysis
        raise InputError(f"{run.path / EVENTS}: {exc}; the run cannot be audited") from None
    except DATA_ERRORS as exc:
        problems = run.store.type_errors()
        if not problems:
            raise
        raise InputError(f"{run.path}: the events store holds damaged data ({'; '.join(problems)}); "
                         f"the run cannot be audited ({type(exc).__name__})") from None
