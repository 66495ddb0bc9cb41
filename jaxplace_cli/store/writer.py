"""Writing the events store: the SQLite writer and the background thread that feeds it.

Why SQLite: it is crash-safe (WAL: a SIGKILLed writer leaves a readable database holding
every committed batch), queryable with plain SQL by users, and in the standard library.
Why a background thread: the hooks only append tuples to deques; the thread takes them every
``interval`` seconds and hands them to the writer — a child process (writer_process.py) under
``jaxplace run``, a ``StoreWriter`` in-process otherwise — so the dispatch path never waits
on disk.
"""
from __future__ import annotations

import _thread
import sqlite3
import sys
import threading
from pathlib import Path

from jaxplace_cli.model.raw import batch_rows
from jaxplace_cli.store.schema import (
    MAGIC,
    MEMORY_TABLES,
    SCHEMA_VERSION,
    STACK_TABLES,
    TABLES,
    create_sql,
    insert_sql,
)

_ALL_TABLES = {**TABLES, **MEMORY_TABLES, **STACK_TABLES}

# Loss accounting (issue 25): per counted table, the rows the recorder had handed on
# (``dispatched``: its running count when the batch was taken) and the rows committed, updated
# in the transaction of every commit. Any reader can then say how many events were lost even
# when run.json could not be finalised (disk full, killed).
COUNTED = ("ops", "transfers")
PROGRESS_SQL = ("CREATE TABLE IF NOT EXISTS progress "
                "(tbl TEXT PRIMARY KEY, dispatched INTEGER, committed INTEGER)")
# Space kept free for the last words: deleted when a write failed (disk full), so the final
# progress row (and run.json, capture/session.py) can still be written.
RESERVE_BYTES = 128 * 1024


def make_reserve(path: Path, size: int = RESERVE_BYTES) -> bool:
    """A file of ``size`` real (not sparse) bytes; False where it cannot be written."""
    try:
        with open(path, "wb") as f:
            f.write(b"\0" * size)
            f.flush()
        return True
    except OSError:
        drop_reserve(path)
        return False


def drop_reserve(path: Path) -> None:
    try:
        Path(path).unlink()
    except OSError:
        pass


def connect(path: Path, native: bool = False):
    """The writer's connection: ``store/_sqlite.c`` when ``native`` (the writer process, a single
    thread: inserts 1.6 -> ~0.8 µs a row, bench/bench_writer.py) and it was built, else the
    sqlite3 module, which releases the GIL around each step for an in-process writer's
    neighbours. Both have ``execute(sql)``, ``executemany(sql, rows)`` and ``close()`` and raise
    ``sqlite3.Error`` subclasses."""
    if native:
        try:
            from jaxplace_cli.store._sqlite import Connection
        except ImportError:  # not built (no compiler or no sqlite3.h), or a broken build
            pass
        else:
            return Connection(str(path))
    return sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)


class StoreWriter:
    """Owns the database connection; ``write(batches)`` is called from the writer thread only."""

    def __init__(self, path: Path, native: bool = False):
        self.path = Path(path)
        self.conn = connect(self.path, native)
        self.native = not isinstance(self.conn, sqlite3.Connection)  # store/_sqlite.c is in use
        # synchronous=OFF: SIGKILL-safe (the OS has the pages); only an OS crash can lose the
        # tail. Set first and the schema made in one transaction: the switch to WAL then syncs
        # nothing (4 fdatasyncs before) and the schema is one commit, not 12 (4.4 -> 2.1 ms a
        # store here, before the script starts; more where a sync or a write is slow)
        self.conn.execute("PRAGMA synchronous=OFF")
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("BEGIN")
        for name, cls in _ALL_TABLES.items():
            self.conn.execute(create_sql(name, cls))
        self.conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            # host_puts: the capture gives explicit puts of NumPy data their identities (the
            # repeated-put rule); a store without it was written before, and that rule is not listed
            [("magic", MAGIC), ("schema_version", str(SCHEMA_VERSION)), ("host_puts", "1")],
        )
        self.conn.execute(PROGRESS_SQL)
        self.conn.execute("COMMIT")
        self._inserts = {name: insert_sql(name, cls) for name, cls in _ALL_TABLES.items()}
        self.rows_written = 0
        self.committed = dict.fromkeys(COUNTED, 0)
        self.dispatched = dict.fromkeys(COUNTED, 0)

    def write(self, batches: dict[str, list], dispatched: dict | None = None) -> None:
        """Commit ``batches`` and, in the same transaction, the progress counts.
        ``dispatched``: the recorder's running counts per counted table, this batch included
        (None: this batch's rows are all there is, as for an in-process writer's own drain)."""
        if dispatched is None:
            dispatched = {t: self.dispatched[t] + len(batches.get(t) or ()) for t in COUNTED}
        self.dispatched = {t: max(self.dispatched[t], int(dispatched.get(t, 0))) for t in COUNTED}
        if not batch_rows(batches):
            return
        c = self.conn
        c.execute("BEGIN")
        try:
            n = 0
            for name, rows in batches.items():
                if rows:
                    c.executemany(self._inserts[name], rows)
                    n += len(rows)
            committed = {t: self.committed[t] + len(batches.get(t) or ()) for t in COUNTED}
            self._progress(committed)
            c.execute("COMMIT")
            self.rows_written += n
            self.committed = committed
        except BaseException:
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled back (disk full, I/O error): report the real error
            raise

    @property
    def sqlite(self) -> str:
        """run.json's ``events.writer.sqlite``: "c" (store/_sqlite.c) or "module" (sqlite3)."""
        return "c" if self.native else "module"

    def _progress(self, committed: dict) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO progress VALUES (?, ?, ?)",
                              [(t, self.dispatched[t], committed[t]) for t in COUNTED])

    def final_progress(self, error: str = "", reserve: Path | None = None) -> None:
        """The last progress row (and the first write error, in ``meta``), after a write
        failed or at the end: the reserve file is dropped first, so a full disk has room."""
        if reserve is not None and error:
            drop_reserve(reserve)
        c = self.conn
        try:
            c.execute("BEGIN")
            self._progress(self.committed)
            if error:
                c.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [("write_error", error[:2000])])
            c.execute("COMMIT")
        except sqlite3.Error:
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def set_meta(self, key: str, value: str) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [(key, value)])

    def close(self) -> None:
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self.conn.close()


# How often the writer thread hands rows on. A SIGKILL loses what the script made since the
# last hand-over: this interval plus the time to take and send a batch, plus however long the
# thread waits for the GIL and a CPU. At 0.25 s that came to 0.258-0.268 s in 2 of 14-20 kills
# on a loaded machine (issue 25); at 0.1 s the 0.25 s that README and docs/reliability.md
# promise holds with room (tests/test_faults_signals.py: 20 random kills). 0.02 s since issue
# 29: the run's end waits for the child to write the last hand-over, which at 0.1 s held up to
# 0.1 s of rows (19k in bench P2: `WriterProcess.close` 48 ms, now 8-9 ms); the child commits
# each hand-over, ~50 a second.
INTERVAL = 0.02


class ServiceThread:
    """A jaxplace thread the script never sees: started with ``_thread.start_new_thread``, it is
    in neither ``threading.enumerate()`` nor ``threading.active_count()`` (a script's ``while
    threading.active_count() > 1: sleep()`` never ended, ``for t in threading.enumerate():
    t.join()`` waited for it forever: python has no such thread), python's exit does not wait
    for it (a daemon thread's ending) and a script's ``threading.settrace`` does not reach it.
    The part of ``threading.Thread`` jaxplace uses: ``start``, ``run``, ``join``, ``is_alive``,
    ``name``, ``ident``. Code running in it must not call ``threading.current_thread()``, which
    would register it (``threading.get_ident()`` does not)."""

    def __init__(self, target=None, args=(), name: str = "jaxplace", daemon: bool = True):
        self._target, self._args, self.name, self.daemon = target, args, name, daemon
        self.ident: int | None = None
        self._started = False
        self._done = threading.Event()

    def start(self) -> None:
        self._started = True
        self.ident = _thread.start_new_thread(self._bootstrap, ())

    def _bootstrap(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # noqa: BLE001 - jaxplace's own bug: said on the process's stderr, never raised
            try:
                if sys.__stderr__ is not None:
                    sys.__stderr__.write(f"jaxplace: internal error in its {self.name} thread: "
                                         f"{type(exc).__name__}: {exc}\n")
            except (OSError, ValueError):
                pass
        finally:
            self._done.set()

    def run(self) -> None:
        if self._target is not None:
            self._target(*self._args)

    def join(self, timeout: float | None = None) -> None:
        if self._started:
            self._done.wait(timeout)

    def is_alive(self) -> bool:
        return self._started and not self._done.is_set()


class BackgroundWriter(ServiceThread):
    """Drains a Recorder's buffers into a writer every ``interval`` seconds (``drain``:
    ``Recorder.take`` for a ``WriterProcess``, ``Recorder.drain`` for a ``StoreWriter``).

    A write failure (disk full, directory removed) never reaches the user's program: the
    thread counts the rows it could not write (``lost_rows``) and keeps draining so memory
    stays bounded; the run summary reports the loss.
    """

    def __init__(self, drain, writer, interval: float = INTERVAL, counts: dict | None = None):
        super().__init__(name="jaxplace-writer", daemon=True)
        self._drain = drain
        self._writer = writer
        self._interval = interval
        self._counts = counts  # the recorder's running counts (Recorder.counts), sent as dispatched
        self._stop_event = threading.Event()
        self.wake = threading.Event()  # set by the recorder's back-pressure: drain now
        self.lost_rows = 0
        self.error: str = ""

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.wake.wait(self._interval)
            self.wake.clear()
            self.flush()
        self.flush()

    def flush(self) -> None:
        batches = self._drain()
        try:
            if self._counts is not None:
                self._writer.write(batches, dict(self._counts))
            else:
                self._writer.write(batches)
        except Exception as exc:  # never propagate into the user's program
            self.lost_rows += batch_rows(batches)
            if not self.error:  # the first failure is the cause; later ones repeat it
                self.error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self._stop_event.set()
        self.wake.set()
        if self.is_alive():
            self.join(timeout=30)
