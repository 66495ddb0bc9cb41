"""store/_sqlite.c, the writer process's SQLite connection in C (issue 29), against Python's
sqlite3 module as the oracle: the same rows written through both give the same tables, value
by value and storage class by storage class, and the same errors (class and message).

Then end to end: `jaxplace run` writes through it (run.json says so), and
JAXPLACE_CAPTURE=python writes through the sqlite3 module, with the same store contents.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
from conftest import SAMPLES, child_env, store_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxplace_cli.store.writer import StoreWriter, connect

_sqlite = pytest.importorskip("jaxplace_cli.store._sqlite", reason="store/_sqlite.c not built")

COLS = 6
SQL = f"INSERT INTO t VALUES ({', '.join('?' * COLS)})"
value = st.one_of(
    st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=20), st.binary(max_size=12))


def _table(path) -> list[tuple]:
    c = sqlite3.connect(path)
    try:
        cols = ", ".join(f"typeof(c{i}), c{i}" for i in range(COLS))
        return c.execute(f"SELECT {cols} FROM t ORDER BY rowid").fetchall()
    finally:
        c.close()


def _write(conn, batches) -> None:
    conn.execute(f"CREATE TABLE t ({', '.join(f'c{i}' for i in range(COLS))})")
    for rows in batches:
        conn.execute("BEGIN")
        conn.executemany(SQL, rows)
        conn.execute("COMMIT")
    conn.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.tuples(*[value] * COLS), max_size=8), max_size=4))
def test_same_rows_as_the_sqlite3_module(tmp_path_factory, batches):
    d = tmp_path_factory.mktemp("twin")
    _write(connect(d / "c.db", native=True), batches)
    _write(connect(d / "py.db", native=False), batches)
    assert _table(d / "c.db") == _table(d / "py.db")
    assert len(_table(d / "c.db")) == sum(map(len, batches))


def _error(conn, sql, rows):
    try:
        conn.executemany(sql, rows)
    except Exception as exc:  # noqa: BLE001 - the class is what is compared
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("rows, sql", [
    ([(1, 2**63, 3, 4, 5, 6)], SQL),  # past 64 bits
    ([(1, object(), 3, 4, 5, 6)], SQL),  # a type the store never holds
    ([(1, 2, 3)], SQL),  # too few values
    ([(1, 2, 3, 4, 5, 6, 7)], SQL),  # too many
    ([(1, 2, 3, 4, 5, 6)], "INSERT INTO nowhere VALUES (?)"),  # no such table
    ([(1,)], "INSERT INTO u VALUES (?)"),  # the primary key twice
])
def test_errors_are_the_sqlite3_modules(tmp_path, rows, sql):
    results = []
    for native in (True, False):
        conn = connect(tmp_path / f"{native}.db", native=native)
        conn.execute(f"CREATE TABLE t ({', '.join(f'c{i}' for i in range(COLS))})")
        conn.execute("CREATE TABLE u (k INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO u VALUES (?)", [(1,)])
        results.append(_error(conn, sql, rows))
        conn.close()
    c_err, py_err = results
    assert py_err is not None and c_err is not None
    assert issubclass(c_err[0], py_err[0]) or issubclass(py_err[0], c_err[0]), (c_err, py_err)
    if py_err[0] is not OverflowError and "binding" not in py_err[1]:
        assert c_err[1] == py_err[1]  # SQLite's own message


def test_a_full_store_and_a_closed_connection(tmp_path):
    """A full disk as SQLite sees it (max_page_count): the sqlite3 module's class and message,
    which the writer process counts as lost rows and reports (tests/test_faults_loss.py)."""
    results = []
    for native in (True, False):
        conn = connect(tmp_path / f"{native}.db", native=native)
        conn.execute("CREATE TABLE t (a)")
        conn.execute("PRAGMA max_page_count=3")
        results.append(_error(conn, "INSERT INTO t VALUES (?)", [("x" * 3000,)] * 20))
        conn.close()
        with pytest.raises(sqlite3.ProgrammingError):
            conn.executemany("INSERT INTO t VALUES (?)", [(1,)])
    assert results[0] == results[1] == (sqlite3.OperationalError, "database or disk is full")


def test_store_writer_batches_and_progress_through_c(tmp_path):
    """StoreWriter's own transaction (rows and the progress counts together) on the C
    connection: the same tables as on the sqlite3 module's."""
    from jaxplace_cli.model.events import OpEvent, TransferEvent

    op = OpEvent(*[0] * len(OpEvent._fields))._replace(seq=1, kind="jit", name="f", devices="cpu:0",
                                                          in_bufs="1,2", out_bufs="3", error="", placed="")
    tr = TransferEvent(*[0] * len(TransferEvent._fields))._replace(seq=2, kind="h2d", src="host", dst="cpu:0",
                                                                      bytes=4, implicit=True, api="x + y")
    dumps = []
    for native in (True, False):
        w = StoreWriter(tmp_path / f"{native}.sqlite", native=native)
        assert w.native is native
        w.write({"ops": [op], "transfers": [tr, tr]}, {"ops": 1, "transfers": 3})
        w.set_meta("k", "v")
        w.final_progress("a write error")
        w.close()
        c = sqlite3.connect(tmp_path / f"{native}.sqlite")
        dumps.append(list(c.iterdump()))
        c.close()
    assert dumps[0] == dumps[1]
    assert any("progress" in line and "'transfers',3,2" in line for line in dumps[0]), dumps[0]


@pytest.mark.parametrize("capture", ["native", "python"])
def test_jaxplace_run_says_how_the_store_was_written(tmp_path, capture):
    out = tmp_path / "run"
    env = child_env(JAXPLACE_CAPTURE=capture)
    proc = subprocess.run([sys.executable, "-m", "jaxplace_cli", "run", "-q", "--no-trace", "--devices", "2",
                           "--out", str(out), str(SAMPLES / "pingpong_eager.py")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    writer = json.loads((out / "run.json").read_text())["events"]["writer"]
    assert writer["kind"] == "process"
    assert writer["sqlite"] == ("c" if capture == "native" else "module")
    [(ops, transfers)] = store_rows(out, "SELECT (SELECT COUNT(*) FROM ops), (SELECT COUNT(*) FROM transfers)")
    assert ops > 0 and transfers > 0
