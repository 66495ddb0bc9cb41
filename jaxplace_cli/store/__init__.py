"""The run directory and its events store: the only SQL in jaxplace.

``layout`` (run-dir names, manifest read/write), ``schema`` (the SQLite tables, generated from
model/events.py), ``writer`` (``StoreWriter`` and the ``BackgroundWriter`` thread), ``reader``
(``StoreReader``: opens and checks a database, iterates events), ``queries`` (named queries
over a reader, returning model types: what the analyses ask), ``rows`` (raw capture rows ->
stored rows), ``writer_process`` (the child process that writes during ``jaxplace run``).
Nothing here imports JAX.
"""
from jaxplace_cli.store.reader import StoreError, StoreReader
from jaxplace_cli.store.schema import MAGIC, SCHEMA_VERSION, TABLES
from jaxplace_cli.store.writer import BackgroundWriter, StoreWriter

__all__ = ["MAGIC", "SCHEMA_VERSION", "TABLES", "BackgroundWriter", "StoreError", "StoreReader",
           "StoreWriter"]
