"""The SQLite run store: schema from the event model, a buffered background writer, a reader.

Why SQLite: it is crash-safe (WAL: a SIGKILLed writer leaves a readable database holding
every committed batch), queryable with plain SQL by users, and in the standard library.
Why a background thread: the hooks only append tuples to deques; the thread takes them every
``interval`` seconds and hands them to the writer — a child process (store_process.py) under
``jaxplace run``, a ``StoreWriter`` in-process otherwise — so the dispatch path never waits
on disk.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import threading
import typing
import urllib.parse
from pathlib import Path
from typing import Iterator, NamedTuple

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.events import BufferEvent, Marker, OpEvent, Site, TransferEvent

SCHEMA_VERSION = 1
MAGIC = "jaxplace-events"

# table name -> event type; column order = NamedTuple field order.
TABLES: dict[str, type[NamedTuple]] = {
    "sites": Site,
    "ops": OpEvent,
    "transfers": TransferEvent,
    "buffers": BufferEvent,
    "markers": Marker,
}
_SQL_TYPES = {int: "INTEGER", str: "TEXT", bool: "INTEGER"}


class StoreError(JaxplaceError):
    """The events database is missing, corrupt, or from another schema version."""


def _create_sql(name: str, cls: type[NamedTuple]) -> str:
    hints = typing.get_type_hints(cls)
    cols = [f"{name} {_SQL_TYPES[hints[name]]}" for name in cls._fields]
    return f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(cols)})"


def _columns(cls: type[NamedTuple]) -> list[tuple[str, str]]:
    hints = typing.get_type_hints(cls)
    return [(f, _SQL_TYPES[hints[f]]) for f in cls._fields]


def _insert_sql(name: str, cls: type[NamedTuple]) -> str:
    marks = ", ".join("?" * len(cls._fields))
    return f"INSERT INTO {name} VALUES ({marks})"


class StoreWriter:
    """Owns the database connection; ``write(batches)`` is called from the writer thread only."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=OFF")  # SIGKILL-safe (the OS has the pages); only an OS crash can lose the tail
        for name, cls in TABLES.items():
            self.conn.execute(_create_sql(name, cls))
        self.conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [("magic", MAGIC), ("schema_version", str(SCHEMA_VERSION))],
        )
        self._inserts = {name: _insert_sql(name, cls) for name, cls in TABLES.items()}
        self.rows_written = 0

    def write(self, batches: dict[str, list]) -> None:
        if not any(batches.values()):
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
        self.lost_rows = 0
        self.error: str = ""

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            self.flush()
        self.flush()

    def flush(self) -> None:
        batches = self._drain()
        try:
            self._writer.write(batches)
        except Exception as exc:  # never propagate into the user's program
            self.lost_rows += sum(len(v) for v in batches.values())
            if not self.error:  # the first failure is the cause; later ones repeat it
                self.error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=30)


class StoreReader:
    """Read-only access to an events database; validates magic and schema version."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise StoreError(f"no events database at {self.path}")
        try:
            # Percent-encoded: a '?', '#' or '%' in the path must not end the file name (an
            # unencoded 'run?x/events.sqlite' would open, even create, 'run' read-write).
            # A finished run has no -wal data (the writer checkpoints it away): open it as
            # immutable, so reading creates no -wal/-shm files in the run directory (and
            # works on read-only media). A live or killed run's -wal holds data, and SQLite
            # cannot read a WAL without writing a -shm next to it: read a private copy (the
            # audit never writes into what it reads).
            self._copy = None
            wal = str(self.path) + "-wal"
            target, mode = self.path.absolute(), "?mode=ro&immutable=1"
            if os.path.isfile(wal) and os.path.getsize(wal) > 0:
                self._copy = tempfile.TemporaryDirectory(prefix="jaxplace-store-")
                target, mode = Path(self._copy.name) / "events.sqlite", ""
                shutil.copyfile(self.path, target)
                shutil.copyfile(wal, str(target) + "-wal")
            self.conn = sqlite3.connect(f"file:{urllib.parse.quote(os.fsencode(target))}{mode}", uri=True)
            # Only real tables are read: a hostile file could define 'ops' as a view (an
            # endless recursive query) and the audit would never finish.
            kinds = dict(self.conn.execute("SELECT name, type FROM sqlite_master").fetchall())
            meta = {}
            if kinds.get("meta") == "table":
                meta = dict(self.conn.execute("SELECT key, value FROM meta").fetchall())
        except (sqlite3.DatabaseError, ValueError, OSError) as exc:
            raise StoreError(
                f"{self.path} is not a readable jaxplace events database ({exc}); "
                "the run may be corrupt"
            ) from None
        if meta.get("magic") != MAGIC:
            raise StoreError(f"{self.path} is not a jaxplace events database")
        try:
            version = int(meta.get("schema_version", "0"))
        except (TypeError, ValueError):
            version = -1
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has events schema version {version}, this jaxplace reads "
                f"version {SCHEMA_VERSION}; use the jaxplace version that recorded it"
            )
        not_tables = [t for t in TABLES if kinds.get(t) != "table"]
        if not_tables:
            raise StoreError(f"{self.path} is not a jaxplace events database (no table {not_tables[0]!r})")
        for name, cls in TABLES.items():
            try:
                cols = [(r[1], r[2].upper()) for r in self.conn.execute(f"PRAGMA table_info({name})")]
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: table {name} is unreadable ({exc})") from None
            if cols != _columns(cls):
                raise StoreError(f"{self.path}: table {name} does not have the columns of events "
                                 f"schema version {SCHEMA_VERSION}; the run is corrupt or was not "
                                 "written by jaxplace")
        self.meta = meta

    def type_errors(self, limit: int = 3) -> list[str]:
        """Columns holding values of the wrong type (a hand-edited or bit-flipped file; SQLite
        stores any type in any column). A full scan: called only to explain a failure, so a
        healthy audit does not pay for it."""
        problems = []
        for name, cls in TABLES.items():
            for col, sql_type in _columns(cls):
                want = "integer" if sql_type == "INTEGER" else "text"
                try:
                    n = self.conn.execute(f"SELECT count(*) FROM {name} WHERE typeof({col}) != ?",
                                          (want,)).fetchone()[0]
                except sqlite3.DatabaseError as exc:
                    return problems + [f"table {name} is unreadable ({exc})"]
                if n:
                    problems.append(f"{name}.{col} holds {n:,} non-{want} value{'s' if n > 1 else ''}")
                    if len(problems) >= limit:
                        return problems
        return problems

    def _rows(self, name: str, cls, order: str = "") -> Iterator:
        try:
            cur = self.conn.execute(f"SELECT * FROM {name} {order}")
            make = cls._make
            for row in cur:
                yield make(row)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: table {name} is unreadable ({exc})") from None

    def sites(self) -> dict[int, Site]:
        return {s.id: s for s in self._rows("sites", Site)}

    def ops(self) -> Iterator[OpEvent]:
        return self._rows("ops", OpEvent, "ORDER BY seq")

    def transfers(self) -> Iterator[TransferEvent]:
        return self._rows("transfers", TransferEvent, "ORDER BY seq")

    def buffers(self) -> Iterator[BufferEvent]:
        return self._rows("buffers", BufferEvent)

    def markers(self) -> Iterator[Marker]:
        return self._rows("markers", Marker, "ORDER BY seq")

    def transfer_totals(self, min_bytes: int) -> list[tuple[str, str, int, int]]:
        """(kind, size class, count, bytes) for every kind and class: 'counted' (≥ min_bytes),
        'small' or 'unknown' (a size < 0). One aggregate query: the audit's summary and the
        line ``jaxplace run`` prints after a run (which must not load a 1M-row run into Python)."""
        q = ("SELECT kind, CASE WHEN bytes < 0 THEN 'unknown' WHEN bytes < ? THEN 'small' "
             "ELSE 'counted' END AS cls, COUNT(*), COALESCE(SUM(bytes), 0) FROM transfers "
             "GROUP BY kind, cls")
        return self.conn.execute(q, (min_bytes,)).fetchall()

    def count(self, name: str) -> int:
        return self.conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0]

    def close(self) -> None:
        self.conn.close()
        if self._copy is not None:
            self._copy.cleanup()

