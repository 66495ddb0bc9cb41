"""Reading the events store: open a database read-only, check it is one of ours, iterate events.

Everything a reader gets may have been written by anyone (a run copied from elsewhere, a
hand-edited file): the reader checks the magic, the schema version and every table's columns
before an analysis sees a row, and never creates a file in the run directory. Named queries
over a reader live in ``queries.py``.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.events import (
    BufferEvent,
    FreeEvent,
    Marker,
    OpEvent,
    ShardEvent,
    Site,
    StackNode,
    TransferEvent,
    TransferStack,
)
from jaxplace_cli.store.schema import MAGIC, MEMORY_TABLES, SCHEMA_VERSION, STACK_TABLES, TABLES, columns

_XINFO = sqlite3.sqlite_version_info >= (3, 26, 0)  # PRAGMA table_xinfo

MAX_CHECK_BYTES = 2 << 30  # stores checked with quick_check (JAXPLACE_MAX_CHECK_BYTES): ~7 s at 2 GiB


def _max_check_bytes() -> int:
    value = os.environ.get("JAXPLACE_MAX_CHECK_BYTES", "")
    return int(value) if value.isdigit() else MAX_CHECK_BYTES


class StoreError(JaxplaceError):
    """The events database is missing, corrupt, or from another schema version."""


_TRUSTED: set = set()  # stores this process wrote and committed itself (see trusting)


@contextmanager
def trusting(path):
    """Read the store at ``path`` without SQLite's integrity check: for the process that wrote
    and committed it moments ago (the writer process making ``jaxplace run``'s verdict, where
    the check was ~9 ms of a 9,000-op run's 55 ms verdict). Anything read from elsewhere is
    checked as always."""
    key = os.path.abspath(path)
    _TRUSTED.add(key)
    try:
        yield
    finally:
        _TRUSTED.discard(key)


@contextmanager
def reading(where):
    """Read a store (through a reader, its queries or an analysis over them) with SQLite's
    errors said once, here: a file damaged past the header the reader checked fails only when
    a query reaches the bad page, anywhere in an analysis. ``where``: the run (or job) read."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{where}: the events store is corrupt or unreadable ({exc})") from None


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
            uri = f"file:{urllib.parse.quote(os.fsencode(target))}{mode}"
            self.conn = sqlite3.connect(uri, uri=True)
            # store/columns.py's C reader opens its own connection by this URI, an immutable file
            # only: no lock and no WAL it could share with this one (a second copy of SQLite in
            # the process would break them). A private copy is made one: its WAL moved into it.
            self.uri = uri if self._copy is None else self._settled(target)
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
        # jaxplace declares no collation: a column compared as NOCASE would make GROUP BY and
        # the C reader's grouping (store/groups.py) count one store two ways
        collated = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE sql LIKE '%collate%'")]
        if collated:
            raise StoreError(f"{self.path} is not a jaxplace events database ({collated[0]!r} declares a collation)")
        not_tables = [t for t in TABLES if kinds.get(t) != "table"]
        if not_tables:
            raise StoreError(f"{self.path} is not a jaxplace events database (no table {not_tables[0]!r})")
        # the memory tables (issue 27) are checked where they exist: older runs lack them
        self.has_memory = all(kinds.get(t) == "table" for t in MEMORY_TABLES)
        self.has_host_puts = meta.get("host_puts") == "1"  # explicit puts' identities (store/writer.py)
        self.has_stacks = all(kinds.get(t) == "table" for t in STACK_TABLES)  # issue 28, as memory
        self._tables = {**TABLES, **(MEMORY_TABLES if self.has_memory else {}),
                        **(STACK_TABLES if self.has_stacks else {})}
        for name, cls in self._tables.items():
            try:
                # table_xinfo, not table_info: it lists generated and hidden columns too (a
                # generated ``zeroblob(1e9)`` column passed the check, then SELECT computed it)
                # (SQLite >= 3.26; an older one cannot read a generated column at all, and ignores
                # the pragma: table_info, whose rows lack the "hidden" field, is what it has)
                cols = ([(r[1], r[2].upper(), r[6]) for r in self.conn.execute(f"PRAGMA table_xinfo({name})")]
                        if _XINFO else [(r[1], r[2].upper(), 0) for r in self.conn.execute(f"PRAGMA table_info({name})")])
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: table {name} is unreadable ({exc})") from None
            if cols != [(c, t, 0) for c, t in columns(cls)]:
                raise StoreError(f"{self.path}: table {name} does not have the columns of events "
                                 f"schema version {SCHEMA_VERSION}; the run is corrupt or was not "
                                 "written by jaxplace")
        self.meta = meta
        self._check_integrity()

    def _settled(self, target: Path) -> str | None:
        """The private copy's WAL checkpointed into it (its own file: nothing else reads it), then
        its immutable URI; None (the sqlite3 module reads all) where the checkpoint did not finish."""
        busy, frames, done = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy or frames != done:
            return None
        return f"file:{urllib.parse.quote(os.fsencode(target))}?mode=ro&immutable=1"

    def _check_integrity(self) -> None:
        """SQLite's ``quick_check``: a page damaged where no query of one command reads it
        (an index, a table only ``suggest`` reads) fails every command alike. Its cost is a read
        of the whole file: 4-5 s for a 1.5 GB store of 10M events (measured, issue 25), small
        beside auditing it; stores over ``MAX_CHECK_BYTES`` are not checked (their reads still
        fail where they reach a bad page)."""
        if os.path.getsize(self.path) > _max_check_bytes() or os.path.abspath(self.path) in _TRUSTED:
            return
        try:
            bad = [r[0] for r in self.conn.execute("PRAGMA quick_check(3)").fetchall() if r[0] != "ok"]
        except sqlite3.DatabaseError as exc:
            bad = [str(exc)]
        if bad:
            raise StoreError(f"{self.path} fails SQLite's integrity check ({'; '.join(bad)[:300]}); "
                             "the store is damaged and the run cannot be audited")

    def type_errors(self, limit: int = 3) -> list[str]:
        """Columns holding values of the wrong type (a hand-edited or bit-flipped file; SQLite
        stores any type in any column). A full scan: called only to explain a failure, so a
        healthy audit does not pay for it."""
        problems = []
        for name, cls in self._tables.items():
            for col, sql_type in columns(cls):
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
            names = ", ".join(c for c, _ in columns(cls))  # never *: only the schema's columns
            cur = self.conn.execute(f"SELECT {names} FROM {name} {order}")
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

    def frees(self) -> Iterator[FreeEvent]:
        """Buffers released (issue 27); none for a store written before the memory tables."""
        return self._rows("frees", FreeEvent, "ORDER BY seq") if self.has_memory else iter(())

    def shards(self) -> Iterator[ShardEvent]:
        return self._rows("shards", ShardEvent) if self.has_memory else iter(())

    def stack_nodes(self) -> Iterator[StackNode]:
        """The call-stack trie (issue 28); none for a store written before it."""
        return self._rows("stacks", StackNode) if self.has_stacks else iter(())

    def transfer_stacks(self) -> Iterator[TransferStack]:
        return self._rows("transfer_stacks", TransferStack) if self.has_stacks else iter(())

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

    def progress(self) -> dict[str, tuple[int, int]] | None:
        """``{table: (dispatched, committed)}`` the writer kept (store/writer.py); None for a
        store written before issue 25, or a table that is not real or not numbers."""
        try:
            kind = self.conn.execute("SELECT type FROM sqlite_master WHERE name = 'progress'").fetchone()
            if not kind or kind[0] != "table":
                return None
            rows = self.conn.execute("SELECT tbl, dispatched, committed FROM progress").fetchall()
        except sqlite3.DatabaseError:
            return None
        out = {}
        for tbl, dispatched, committed in rows[:16]:
            if type(tbl) is str and type(dispatched) is int and type(committed) is int:
                out[tbl] = (max(0, dispatched), max(0, committed))
        return out

    def count(self, name: str) -> int:
        return self.conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0]

    def close(self) -> None:
        self.conn.close()
        if self._copy is not None:
            self._copy.cleanup()

