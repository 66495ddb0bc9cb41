"""The SQLite schema, generated from the event model (model/events.py).

One table per event type; its columns are the NamedTuple's fields, in order, so a row is the
event (``executemany`` takes the tuples as they are, ``Event._make`` turns a row of its columns
back into one). The writer creates the tables from these definitions and the reader refuses a
database whose tables do not match them.
"""
from __future__ import annotations

import typing
from typing import NamedTuple

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
# Tables a run written before issue 27 lacks: the writer creates them, the reader checks them
# where they exist; a store without them has no memory data (and its audit no ``memory`` key).
MEMORY_TABLES: dict[str, type[NamedTuple]] = {
    "frees": FreeEvent,
    "shards": ShardEvent,
}
# Tables a run written before issue 28 lacks: the user call stacks of transfers; a store without
# them audits as before (a transfer's stack is then its site alone: analysis/stacks.py).
STACK_TABLES: dict[str, type[NamedTuple]] = {
    "stacks": StackNode,
    "transfer_stacks": TransferStack,
}
# A table keyed on its first column (SQLite's rowid): the stacks' join to the transfers by seq is
# a lookup, not a temporary index (1M transfers: 1.2 s, was 2.4 s); a repeated key replaces.
KEYED = {"transfer_stacks"}
_SQL_TYPES = {int: "INTEGER", str: "TEXT", bool: "INTEGER"}


def columns(cls: type[NamedTuple]) -> list[tuple[str, str]]:
    """(column name, SQL type) of an event table, in storage order."""
    hints = typing.get_type_hints(cls)
    return [(f, _SQL_TYPES[hints[f]]) for f in cls._fields]


def create_sql(name: str, cls: type[NamedTuple]) -> str:
    cols = [f"{col} {sql_type}" for col, sql_type in columns(cls)]
    if name in KEYED:
        cols[0] += " PRIMARY KEY"
    return f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(cols)})"


def insert_sql(name: str, cls: type[NamedTuple]) -> str:
    marks = ", ".join("?" * len(cls._fields))
    return f"INSERT {'OR REPLACE ' if name in KEYED else ''}INTO {name} VALUES ({marks})"
