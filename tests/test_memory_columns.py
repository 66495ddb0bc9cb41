"""store/memory.py's and store/columns.py's column readers (the memory analysis reads the
buffers, frees and shards tables as numpy columns from one aggregate query, the step counts the
transfers a million rows at a time): checked against the rows SQLite returns one
by one, on both ways device labels become codes (a CASE in the query, or a Python map past
MAX_CASE_LABELS), and on damaged values (one-line data errors, never a wrong number)."""
import sqlite3
from types import SimpleNamespace

import pytest

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.store import columns, queries
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


# -- store/columns.py: the same reader a million rows at a time (the per-step transfer counts) --

def _transfers(rows):
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE transfers (seq INTEGER, kind TEXT, bytes INTEGER)")
    conn.executemany("INSERT INTO transfers (rowid, seq, kind, bytes) VALUES (?, ?, ?, ?)", rows)
    return SimpleNamespace(conn=conn)


# sparse rowids (a huge gap, a negative one) and an unknown kind, a NULL and a negative size
TRANSFERS = [(-5, 10, "h2d", 4), (1, 11, "d2h", 16), (2, 3, "h2d", 8), (7, 12, "d2d", None),
             (2**40, 13, "weird", -2), (2**40 + 1, 14, "h2d", 2**40)]


@pytest.mark.parametrize("chunk", [columns.CHUNK, 1, 2, 4])
def test_transfer_columns_equal_the_rows_read_one_by_one(monkeypatch, chunk):
    monkeypatch.setattr(columns, "CHUNK", chunk)
    cols = queries.transfer_columns_from(_transfers(TRANSFERS), 10)
    got = list(zip(cols["seq"].tolist(), cols["kind"].tolist(), cols["bytes"].tolist()))
    # by hand: rows of seq >= 10 in rowid order; h2d 0, d2h 1, d2d 2, another kind -1; a size
    # that is NULL or negative counts as 0 bytes
    assert got == [(10, 0, 4), (11, 1, 16), (12, 2, 0), (13, -1, 0), (14, 0, 2**40)]


@pytest.mark.parametrize("bad", [(99, 15, "h2d", "4k"), (99, 15, "h2d", 1.5), (99, "x", "h2d", 4)])
def test_a_damaged_transfer_is_a_data_error(monkeypatch, bad):
    monkeypatch.setattr(columns, "CHUNK", 2)
    with pytest.raises(DataError):
        queries.transfer_columns_from(_transfers(TRANSFERS + [bad]), 0)


def test_per_step_counts_by_hand_also_past_int64():
    """Two steps [0, 10) and [10, 20); a transfer before, between and after them, one of an
    unknown kind; two of 2**62 B in step 0 sum past int64 (a damaged store's sizes): Python's
    ints, not a wrapped-around sum."""
    from jaxplace_cli.analysis.steps import Step, StepInfo, per_step_transfers

    store = _transfers([(1, 1, "h2d", 2**62), (2, 2, "h2d", 2**62), (3, 9, "d2h", 4), (4, 10, "h2d", 8),
                        (5, 10, "weird", 8), (6, 15, "d2d", 16), (7, 20, "h2d", 32), (8, 0, "h2d", 64)])
    info = StepInfo("annotation", "", [Step(0, "a", 1, 10), Step(1, "b", 10, 20)])
    stats = per_step_transfers(SimpleNamespace(store=store), info)
    assert {k: (s.counts, s.bytes) for k, s in stats.items()} == {
        "h2d": ([2, 1], [2**63, 8]), "d2h": ([1, 0], [4, 0]), "d2d": ([0, 1], [0, 16])}
    store = _transfers([(1, 1, "h2d", 5), (2, 3, "h2d", 7)])  # the int64 path
    stats = per_step_transfers(SimpleNamespace(store=store), info)
    assert (stats["h2d"].counts, stats["h2d"].bytes) == ([2, 0], [12, 0])
