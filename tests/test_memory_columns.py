"""store/memory.py's column reader (the memory analysis reads the buffers, frees and shards
tables as numpy columns from one aggregate query): checked against the rows SQLite returns one
by one, on both ways device labels become codes (a CASE in the query, or a Python map past
MAX_CASE_LABELS), and on damaged values (one-line data errors, never a wrong number)."""
import sqlite3
from types import SimpleNamespace

import pytest

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.store import memory as q

ROWS = [(7, 1, "cpu:0", 4096, 3), (9, 1, "cpu:1", 16, 3), (8, 2, "cpu:0,cpu:1", 2048, 4),
        (12, 5, "cpu:2", 0, 5), (-3, 6, "cpu:1", 8, 5)]


def _store(rows):
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE buffers (buf INTEGER, seq INTEGER, device TEXT, bytes INTEGER, site INTEGER)")
    conn.executemany("INSERT INTO buffers VALUES (?, ?, ?, ?, ?)", rows)
    return SimpleNamespace(conn=conn)


@pytest.mark.parametrize("case_limit", [q.MAX_CASE_LABELS, 1])
def test_columns_equal_the_rows_read_one_by_one(monkeypatch, case_limit):
    monkeypatch.setattr(q, "MAX_CASE_LABELS", case_limit)  # 1: the Python map of the labels
    cols, labels = q.buffer_columns(_store(ROWS))
    got = list(zip(cols["buf"].tolist(), cols["seq"].tolist(), [labels[c] for c in cols["device"].tolist()],
                   cols["bytes"].tolist(), cols["site"].tolist()))
    assert got == ROWS


def test_an_empty_table_is_empty_columns():
    cols, labels = q.buffer_columns(_store([]))
    assert labels == [] and all(c.size == 0 for c in cols.values())


@pytest.mark.parametrize("bad", [(1, 1, "cpu:0", "4k", 1), (1, 1, "cpu:0", 1.5, 1), (1, None, "cpu:0", 4, 1),
                                 (1, 1, None, 4, 1)])
def test_a_damaged_value_is_a_data_error(bad):
    with pytest.raises(DataError):
        q.buffer_columns(_store(ROWS + [bad]))
