"""Writing the events store: the SQLite writer and the background thread that feeds it.

Why SQLite: it is crash-safe (WAL: a SIGKILLed writer leaves a readable database holding
every committed batch), queryable with plain SQL by users, and in the standard library.
Why a background thread: the hooks only append tuples to deques; the thread takes them every
``interval`` seconds and hands them to the writer — a child process (writer_process.py) under
``jaxplace run``, a ``StoreWriter`` in-process otherwise — so the dispatch path never waits
on disk.
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from jaxplace_cli.model.raw import batch_rows
from jaxplace_cli.store.schema import MAGIC, SCHEMA_VERSION, TABLES, create_sql, insert_sql


class StoreWriter:
    """Owns the database connection; ``write(batches)`` is called from the writer thread only."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=OFF")  # SIGKILL-safe (the OS has the pages); only an OS crash can lose the tail
        for name, cls in TABLES.items():
            self.conn.execute(create_sql(name, cls))
        self.conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [("magic", MAGIC), ("schema_version", str(SCHEMA_VERSION))],
        )
        self._inserts = {name: insert_sql(name, cls) for name, cls in TABLES.items()}
        self.rows_written = 0

    def write(self, batches: dict[str, list]) -> None:
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
            c.execute("COMMIT")
            self.rows_written += n
        except BaseException:
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled back (disk full, I/O error): report the real error
            raise

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def close(self) -> None:
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self.conn.close()


class BackgroundWriter(threading.Thread):
    """Drains a Recorder's buffers into a writer every ``interval`` seconds (``drain``:
    ``Recorder.take`` for a ``WriterProcess``, ``Recorder.drain`` for a ``StoreWriter``).

    A write failure (disk full, directory removed) never reaches the user's program: the
    thread counts the rows it could not write (``lost_rows``) and keeps draining so memory
    stays bounded; the run summary reports the loss.
    """

    def __init__(self, drain, writer, interval: float = 0.25):
        super().__init__(name="jaxplace-writer", daemon=True)
        self._drain = drain
        self._writer = writer
        self._interval = interval
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
