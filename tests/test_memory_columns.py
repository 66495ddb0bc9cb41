"""store/memory.py's and store/columns.py's column readers (the memory analysis reads the
buffers, frees and shards tables as numpy columns, the step counts the transfers, the summary
groups them): checked against the rows SQLite returns one by one, on both paths — store/_columns.c
(a store opened from a file, by its URI) and the SQL path without it (group_concat strings; the
device labels as a CASE in the query, or a Python map past MAX_CASE_LABELS) — and on damaged
values (one-line data errors, never a wrong number)."""
import sqlite3
from types import SimpleNamespace

import pytest

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.store import columns, groups, queries
from jaxplace_cli.store import memory as q

ROWS = [(7, 1, "cpu:0", 4096, 3), (9, 1, "cpu:1", 16, 3), (8, 2, "cpu:0,cpu:1", 2048, 4),
        (12, 5, "cpu:2", 0, 5), (-3, 6, "cpu:1", 8, 5)]
PATHS = ["native", "sql"]


@pytest.fixture(params=PATHS)
def make_store(request, tmp_path):
    """``make_store(schema, rows, insert)``: a store on a file, read through store/_columns.c
    ("native": it has a ``uri``) or through Python's sqlite3 ("sql": no ``uri``)."""
    if request.param == "native" and columns.NATIVE is None:
        pytest.skip("store/_columns.c is not built here (test_native says whether it must be)")
    made = []

    def make(schema, rows, insert, encoding="UTF-8"):
        path = tmp_path / f"s{len(made)}.sqlite"
        made.append(path)
        conn = sqlite3.connect(path)
        conn.execute(f"PRAGMA encoding = '{encoding}'")
        conn.execute(schema)
        conn.executemany(insert, rows)
        conn.commit()
        store = SimpleNamespace(conn=conn)
        if request.param == "native":
            store.uri = f"file:{path}?mode=ro"
        return store
    return make


def _store(make_store, rows):
    return make_store("CREATE TABLE buffers (buf INTEGER, seq INTEGER, device TEXT, bytes INTEGER, site INTEGER)",
                      rows, "INSERT INTO buffers VALUES (?, ?, ?, ?, ?)")


@pytest.mark.parametrize("case_limit", [columns.MAX_CASE_LABELS, 1])
def test_columns_equal_the_rows_read_one_by_one(monkeypatch, make_store, case_limit):
    monkeypatch.setattr(columns, "MAX_CASE_LABELS", case_limit)  # 1: the Python map of the labels
    cols, labels = q.buffer_columns(_store(make_store, ROWS))
    got = list(zip(cols["buf"].tolist(), cols["seq"].tolist(), [labels[c] for c in cols["device"].tolist()],
                   cols["bytes"].tolist(), cols["site"].tolist()))
    assert got == ROWS


def test_an_empty_table_is_empty_columns(make_store):
    cols, labels = q.buffer_columns(_store(make_store, []))
    assert labels == [] and all(c.size == 0 for c in cols.values())


@pytest.mark.parametrize("bad", [(1, 1, "cpu:0", "4k", 1), (1, 1, "cpu:0", 1.5, 1), (1, None, "cpu:0", 4, 1),
                                 (1, 1, None, 4, 1), (1, 1, b"cpu:0", 4, 1)])
def test_a_damaged_value_is_a_data_error(make_store, bad):
    with pytest.raises(DataError):
        q.buffer_columns(_store(make_store, ROWS + [bad]))


@pytest.mark.parametrize("encoding", ["UTF-8", "UTF-16le"])
def test_many_distinct_texts_keep_their_rows(make_store, encoding):
    """3,000 labels (past the C reader's first table sizes, and MAX_CASE_LABELS), each in runs
    and scattered, a non-ASCII one and an empty one: every row reads back its own label, in a
    UTF-8 store (read as stored) and a UTF-16 one (converted)."""
    names = [f"dev{i % 3000}" for i in range(9000)] + ["gpu:ü", "", "dev7"]
    rows = [(i, i, name, i, 1) for i, name in enumerate(names)]
    store = make_store("CREATE TABLE buffers (buf INTEGER, seq INTEGER, device TEXT, bytes INTEGER, site INTEGER)",
                       rows, "INSERT INTO buffers VALUES (?, ?, ?, ?, ?)", encoding)
    assert store.conn.execute("PRAGMA encoding").fetchone()[0] == encoding
    cols, labels = q.buffer_columns(store)
    assert [labels[c] for c in cols["device"].tolist()] == names
    assert sorted(labels) == sorted(set(names))


def test_text_that_is_not_utf8_is_an_error(make_store):
    with pytest.raises((sqlite3.DatabaseError, DataError)):
        store = _store(make_store, ROWS)
        store.conn.execute("UPDATE buffers SET device = CAST(x'ff00' AS TEXT) WHERE buf = 7")
        store.conn.commit()
        q.buffer_columns(store)


# -- store/columns.py: the same reader a million rows at a time (the per-step transfer counts) --

def _transfers(rows, make_store=None):
    schema = "CREATE TABLE transfers (seq INTEGER, kind TEXT, bytes INTEGER)"
    insert = "INSERT INTO transfers (rowid, seq, kind, bytes) VALUES (?, ?, ?, ?)"
    if make_store is not None:
        return make_store(schema, rows, insert)
    conn = sqlite3.connect(":memory:")
    conn.execute(schema)
    conn.executemany(insert, rows)
    return SimpleNamespace(conn=conn)


# sparse rowids (a huge gap, a negative one) and an unknown kind, a NULL and a negative size
TRANSFERS = [(-5, 10, "h2d", 4), (1, 11, "d2h", 16), (2, 3, "h2d", 8), (7, 12, "d2d", None),
             (2**40, 13, "weird", -2), (2**40 + 1, 14, "h2d", 2**40)]


@pytest.mark.parametrize("chunk", [columns.CHUNK, 1, 2, 4])
def test_transfer_columns_equal_the_rows_read_one_by_one(monkeypatch, make_store, chunk):
    monkeypatch.setattr(columns, "CHUNK", chunk)  # the SQL path's chunks; the C path reads all at once
    cols = queries.transfer_columns_from(_transfers(TRANSFERS, make_store), 10)
    got = list(zip(cols["seq"].tolist(), cols["kind"].tolist(), cols["bytes"].tolist()))
    # by hand: rows of seq >= 10 in rowid order; h2d 0, d2h 1, d2d 2, another kind -1; a size
    # that is NULL or negative counts as 0 bytes
    assert got == [(10, 0, 4), (11, 1, 16), (12, 2, 0), (13, -1, 0), (14, 0, 2**40)]


@pytest.mark.parametrize("bad", [(99, 15, "h2d", "4k"), (99, 15, "h2d", 1.5), (99, "x", "h2d", 4)])
def test_a_damaged_transfer_is_a_data_error(monkeypatch, make_store, bad):
    monkeypatch.setattr(columns, "CHUNK", 2)
    with pytest.raises(DataError):
        queries.transfer_columns_from(_transfers(TRANSFERS + [bad], make_store), 0)


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


# -- store/groups.py: the transfers grouped (the audit's kind totals, routes and sites) --------

GROUP_SCHEMA = ("CREATE TABLE transfers (kind TEXT, src TEXT, dst TEXT, bytes INTEGER, implicit INTEGER, "
                "blocking INTEGER, api TEXT, site INTEGER)")
GROUP_INSERT = "INSERT INTO transfers VALUES (?, ?, ?, ?, ?, ?, ?, ?)"


def _groups(make_store, rows, min_bytes=1024):
    return groups.transfer_groups(make_store(GROUP_SCHEMA, rows, GROUP_INSERT), min_bytes)


def test_groups_by_hand(make_store):
    rows = [("h2d", "host", "cpu:0", 4096, 1, 0, "jit(f)", 3), ("h2d", "host", "cpu:0", 10, 1, 0, "jit(f)", 3),
            ("h2d", "host", "cpu:0", -1, 1, 0, "jit(f)", 3), ("d2h", "cpu:0", "host", 2048, 0, 1, "float", 9),
            ("h2d", "host", "cpu:0", 1024, 1, 0, "jit(f)", 3), ("h2d", "host", "cpu:1", 8, 0, 0, "device_put", 2),
            ("d2d", "cpu:0", "cpu:1", 2**40, 0, 0, "device_put", 2), ("d2h", "cpu:0", "host", 4, 0, 1, "float", 9)]
    # by hand, keys ascending (kind, src, dst, site, api, implicit, blocking): count and bytes
    # >= 1024, count and bytes below, count of negative sizes
    assert _groups(make_store, rows) == [
        ("d2d", "cpu:0", "cpu:1", 2, "device_put", 0, 0, 1, 2**40, 0, 0, 0),
        ("d2h", "cpu:0", "host", 9, "float", 0, 1, 1, 2048, 1, 4, 0),
        ("h2d", "host", "cpu:0", 3, "jit(f)", 1, 0, 2, 5120, 1, 10, 1),
        ("h2d", "host", "cpu:1", 2, "device_put", 0, 0, 0, 0, 1, 8, 0)]
    assert _groups(make_store, []) == []


def test_both_paths_group_alike(tmp_path):
    """Both paths over one file of 20,000 transfers (every key varied, sites past 2**24 apart,
    text keys that sort differently as bytes and as Python's casefold): the same rows."""
    if columns.NATIVE is None:
        pytest.skip("store/_columns.c is not built here")
    import random

    rnd = random.Random(5)
    kinds, devs, apis = ["h2d", "d2h", "d2d"], ["host", "cpu:0", "cpu:1", "Cpu:0", "gpu:é"], ["a", "B", "jit(f)", "é"]
    rows = [(rnd.choice(kinds), rnd.choice(devs), rnd.choice(devs), rnd.choice([-1, 0, 5, 1023, 1024, 2**33, 2**50]),
             rnd.randint(0, 1), rnd.randint(0, 1), rnd.choice(apis), rnd.choice([0, 1, 7, 2**30, 2**40]))
            for _ in range(20_000)]
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(GROUP_SCHEMA)
    conn.executemany(GROUP_INSERT, rows)
    conn.commit()
    native = groups.transfer_groups(SimpleNamespace(conn=conn, uri=f"file:{path}?mode=ro"), 1024)
    sql = groups.transfer_groups(SimpleNamespace(conn=conn), 1024)
    assert native == sql and len(sql) > 500
    assert sum(r[7] + r[9] + r[11] for r in sql) == len(rows)


@pytest.mark.parametrize("bad", [("h2d", "host", "cpu:0", "4k", 0, 0, "a", 1), ("h2d", "host", "cpu:0", None, 0, 0, "a", 1),
                                 ("h2d", "host", "cpu:0", 1.5, 0, 0, "a", 1)])
def test_a_damaged_size_is_a_data_error_when_grouped(make_store, bad):
    with pytest.raises(DataError):
        _groups(make_store, [("h2d", "host", "cpu:0", 8, 0, 0, "a", 1), bad])


def test_sizes_summing_past_64_bits_are_refused(make_store):
    """SQLite's SUM refuses it ("integer overflow"); the C path says the same: never a wrapped sum."""
    rows = [("h2d", "host", "cpu:0", 2**62, 0, 0, "a", 1)] * 2
    with pytest.raises((DataError, sqlite3.OperationalError)):
        _groups(make_store, rows)
    assert _groups(make_store, rows[:1] + [("h2d", "host", "cpu:0", 2**62 - 1, 0, 0, "a", 1)])[0][8] == 2**63 - 1


# -- analysis/memory_columns.py: the allocations and each device's events, by hand -------------

def test_lives_and_device_events_by_hand(make_store):
    """Rows out of (seq, buf) order; buffer 10 seen twice (one allocation) and freed twice (its
    first free counts); 13 a device_put of 12 onto its own device (an alias: one allocation, freed
    at the later of the two frees); 14 over two devices by its label (split evenly); 15 by its
    shard rows; 11 and 15 never freed."""
    from jaxplace_cli.analysis import memory_columns as mc

    store = _store(make_store, [(20, 3, "cpu:0", 100, 1), (10, 1, "cpu:0", 64, 1), (11, 1, "cpu:1", 32, 2),
                                (12, 2, "cpu:0", 16, 2), (13, 2, "cpu:0", 16, 3), (14, 4, "cpu:0,cpu:1", 50, 4),
                                (15, 5, "cpu:0,cpu:1", 40, 5), (10, 6, "cpu:0", 64, 1)])
    for schema, rows in [("frees (buf INTEGER, seq INTEGER)", [(12, 7), (13, 9), (10, 8), (10, 5), (14, 10), (20, 4)]),
                         ("shards (buf INTEGER, device TEXT, bytes INTEGER)", [(15, "cpu:0", 30), (15, "cpu:1", 10)]),
                         ("ops (seq INTEGER, kind TEXT, error TEXT, in_bufs TEXT, out_bufs TEXT)",
                          [(2, "device_put", "", "12", "13")])]:
        store.conn.execute(f"CREATE TABLE {schema}")
        store.conn.executemany(f"INSERT INTO {schema.split()[0]} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    store.conn.commit()
    store.has_memory = True
    lv = mc.lives(store)
    assert lv.root.tolist() == [10, 11, 12, 20, 14, 15] and lv.buf.tolist() == [10, 11, 12, 20, 14, 15]
    assert lv.seq.tolist() == [1, 1, 2, 3, 4, 5] and lv.site.tolist() == [1, 2, 2, 1, 4, 5]
    assert lv.nbytes.tolist() == [64, 32, 16, 100, 50, 40]
    assert lv.end.tolist() == [5, 0, 9, 4, 10, 0] and lv.ended.tolist() == [True, False, True, True, True, False]
    parts = [(e, lv.devices[d], b) for e, d, b in zip(lv.part_life.tolist(), lv.part_dev.tolist(), lv.part_bytes.tolist())]
    assert parts == [(0, "cpu:0", 64), (1, "cpu:1", 32), (2, "cpu:0", 16), (3, "cpu:0", 100), (4, "cpu:0", 25),
                     (4, "cpu:1", 25), (5, "cpu:0", 30), (5, "cpu:1", 10)]
    ev = {lv.devices[d]: e for d, e in mc.device_events(lv).items()}
    cpu0 = ev["cpu:0"]
    # a free sorts before the allocations of its seq
    assert list(zip(cpu0.seq.tolist(), cpu0.delta.tolist(), cpu0.life.tolist())) == [
        (1, 64, 0), (2, 16, 2), (3, 100, 3), (4, -100, 3), (4, 25, 4), (5, -64, 0), (5, 30, 5), (9, -16, 2), (10, -25, 4)]
    assert list(zip(cpu0.series_seq.tolist(), cpu0.series_bytes.tolist())) == [
        (1, 64), (2, 80), (3, 180), (4, 105), (5, 71), (9, 55), (10, 30)]
    assert mc.peak(cpu0.series_seq, cpu0.series_bytes) == (180, 3)
    cpu1 = ev["cpu:1"]
    assert list(zip(cpu1.seq.tolist(), cpu1.delta.tolist())) == [(1, 32), (4, 25), (5, 10), (10, -25)]


def test_label_splits_past_the_bound_are_a_data_error(make_store, monkeypatch):
    """Buffers without shard rows are split by their label: a store whose labels name thousands
    of devices on many rows asked for rows x devices parts (unbounded memory from a crafted
    store). Past MAX_SPLIT_PARTS that is a one-line DataError before any part is made; at the
    bound, the split is made as before (6 parts: 2 rows x 3 devices)."""
    from jaxplace_cli.analysis import memory_columns as mc

    store = _store(make_store, [(1, 1, "a,b,c", 30, 1), (2, 2, "a,b,c", 60, 1), (3, 3, "a", 5, 1)])
    for schema in ("frees (buf INTEGER, seq INTEGER)", "shards (buf INTEGER, device TEXT, bytes INTEGER)",
                   "ops (seq INTEGER, kind TEXT, error TEXT, in_bufs TEXT, out_bufs TEXT)"):
        store.conn.execute(f"CREATE TABLE {schema}")
    store.conn.commit()
    store.has_memory = True
    monkeypatch.setattr(mc, "MAX_SPLIT_PARTS", 6)
    lv = mc.lives(store)
    assert [(lv.devices[d], b) for d, b in zip(lv.part_dev.tolist(), lv.part_bytes.tolist())] == [
        ("a", 10), ("b", 10), ("c", 10), ("a", 20), ("b", 20), ("c", 20), ("a", 5)]
    monkeypatch.setattr(mc, "MAX_SPLIT_PARTS", 5)
    with pytest.raises(DataError, match=r"^buffers: their multi-device labels would split into 6 per-device parts"):
        mc.lives(store)


def test_the_row_at_the_smallest_rowid_is_read(make_store, monkeypatch):
    """The SQL path reads a chunk at a time from rowid -2**63 on: its first query skipped that
    very row (``rowid > ?``), and a 10 GB buffer stored there went missing from the peak (review)."""
    monkeypatch.setattr(columns, "CHUNK", 1)
    store = make_store("CREATE TABLE frees (buf INTEGER, seq INTEGER)", [(-(2**63), 7, 1), (1, 8, 2), (2**63 - 1, 9, 3)],
                       "INSERT INTO frees (rowid, buf, seq) VALUES (?, ?, ?)")
    store.has_memory = True
    cols = q.free_columns(store)
    assert cols["buf"].tolist() == [7, 8, 9] and cols["seq"].tolist() == [1, 2, 3]


def test_live_bytes_at_seqs_past_int64_are_read_not_raised():
    """A damaged store's step may end at a seq past int64 (the markers hold any integer): before
    every point of the series is 0 bytes, after every point the last; was OverflowError, exit 3."""
    import numpy as np

    from jaxplace_cli.analysis.memory import DeviceMemory, MemoryReport, Series

    series = Series(np.array([-(2**63), 5, 9]), np.array([10, 30, 20]))
    report = MemoryReport("tracked", [DeviceMemory("cpu:0", 30, 5, None, 20, series=series)], [])
    # by hand: -2**63 - 1 precedes the first point; -2**63 is the first; 7 after 5; past 2**63 the last
    assert report.live_at_each("cpu:0", [-(2**63) - 1, -(2**63), 4, 7, 2**63, 2**70]) == [0, 10, 10, 30, 20, 20]
    assert report.live_at_each("cpu:1", [1, 2]) == [0, 0] and report.live_at("cpu:0", 9) == 20
