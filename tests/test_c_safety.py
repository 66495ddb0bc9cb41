"""Memory safety of the C extensions where Python can run in the middle of a C routine or an
object is used outside its protocol (a review of capture/_native.c, model/_packed.c and
store/_sqlite.c, 2026-12-05; each case crashed the interpreter or lost a row before its fix).
Each runs in a child process, so a regression fails the test instead of killing the suite."""
import subprocess
import sys
from textwrap import dedent

import pytest
from conftest import REPO, child_env

pytest.importorskip("jaxplace_cli.model._packed", reason="the C extensions are not built")


def _child(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", dedent(code)], cwd=tmp_path, env=child_env(PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=120)


def test_a_row_recorded_while_take_builds_its_result_is_kept(tmp_path):
    """RowBuffer.take's result tuple can start a collection whose callbacks record a row (a
    finalizer doing jnp work): the row, and the first definition of its string, must be in
    this batch, and the next batch must still decode."""
    proc = _child("""
        import gc
        from collections import deque
        from jaxplace_cli.model._packed import RowBuffer, Decoder

        fired, sink = [], None
        def cb(phase, info):
            if phase == "start" and sink is not None and not fired:
                fired.append(1)
                sink.append((2, "born-in-take"))
        gc.callbacks.append(cb)
        keep = [tuple([i, 0, 0, 0]) for i in range(2100)]  # empty the free list of 4-tuples
        rb = RowBuffer(); s = rb.sink(0, deque()); dec = Decoder()
        s.append((1, "old"))
        gc.collect()
        gc.set_threshold(50)
        junk = []
        while gc.get_count()[0] < 50:
            junk.append([])
        sink = s
        data, n_ops, _, _ = rb.take()  # its result tuple: the collection's 51st allocation
        sink = None
        gc.set_threshold(700)
        print(bool(fired), n_ops, rb.pending, dec.decode(data)[0])
        s.append((3, "born-in-take"))
        print(dec.decode(rb.take()[0])[0])
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = proc.stdout.splitlines()
    assert first == "True 2 0 [(1, 'old'), (2, 'born-in-take')]"  # the collection did run inside take
    assert second == "[(3, 'born-in-take')]"


@pytest.mark.parametrize("inner", ["c.close()", "[c.executemany(f'insert into t values (? + {k})', [(k,)]) for k in range(16)]",
                                   "c.execute('select 1')"])
def test_the_writer_connection_refuses_reentry_from_its_rows(tmp_path, inner):
    """executemany runs the rows' iterator: closing the connection or evicting the statement
    in use from there freed it under the loop (a segfault); now sqlite3.ProgrammingError."""
    pytest.importorskip("jaxplace_cli.store._sqlite", reason="store/_sqlite.c not built")
    proc = _child(f"""
        import sqlite3
        from jaxplace_cli.store._sqlite import Connection
        c = Connection("r.db")
        c.execute("create table t(a)")
        def rows():
            yield (1,)
            {inner}
            yield (2,)
        try:
            c.executemany("insert into t values (?)", rows())
        except sqlite3.ProgrammingError as exc:
            print("refused:", exc)
        c.executemany("insert into t values (?)", [(3,)])  # still usable
        c.close()
        print(sqlite3.connect("r.db").execute("select a from t order by rowid").fetchall())
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    refused, rows = proc.stdout.splitlines()
    assert refused.startswith("refused: ")
    assert rows == "[(1,), (3,)]"  # the first row went in before the refusal, none from the inner call


@pytest.mark.parametrize("code", [
    "import sys\nfrom jaxplace_cli.capture._native import SiteCache\nSiteCache.__new__(SiteCache)(sys._getframe())",
    "from jaxplace_cli.model._packed import Decoder\nDecoder.__new__(Decoder).decode(b'')",
    "from collections import deque\nfrom jaxplace_cli.model._packed import RowBuffer\n"
    "RowBuffer.__new__(RowBuffer).sink(0, deque())",
])
def test_objects_made_without_init_raise_instead_of_crashing(tmp_path, code):
    proc = _child(code, tmp_path)
    assert proc.returncode == 1 and "RuntimeError" in proc.stderr and "before __init__" in proc.stderr, \
        (proc.returncode, proc.stderr[-1000:])


def test_finish_core_survives_rows_that_empty_its_inputs_and_cache(tmp_path):
    """finish_core (store/_sqlite.c) runs Python in the middle of a row: a result's
    ``committed`` whose ``__bool__`` empties the shape cache and the batch's lists. The row
    being made keeps what it reads, and the result is the Python finish_rows' one."""
    pytest.importorskip("jaxplace_cli.store._sqlite", reason="store/_sqlite.c is not built")
    proc = _child("""
        import copy
        from jaxplace_cli.model.raw import OP_FIELDS, OP_IN_BUFS
        from jaxplace_cli.store import rows as R

        class Evil:
            def __bool__(self):
                R._SHAPE_FORMATS.clear()
                batch["ops"].clear()
                batch["buffers"].clear()
                return True
            def __eq__(self, other):
                return isinstance(other, Evil)
            __hash__ = object.__hash__

        def op(i):
            row = [i] + [f"v{j}" for j in range(1, OP_FIELDS)]
            row[OP_IN_BUFS], row[OP_IN_BUFS + 1] = (i, i + 1), i + 2
            return tuple(row) + ((i + 1, 7), ("float32", 4), Evil())

        def make():
            return {"sites": [], "stacks": [], "ops": [op(1), op(2), op(3)], "transfers": [],
                    "buffers": [(9, 9, "cpu:0", (31, 3), ("f32", 4), Evil(), "s")], "markers": [],
                    "frees": None, "shards": []}

        batch = make()
        got = R.finish_rows(batch)
        batch = make()
        R._SHAPE_FORMATS.clear()
        want = R.python_finish_rows(batch)
        print(len(got["ops"]), len(got["buffers"]), got["buffers"][0][3], got == want)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1", "1", "2x7", "True"]


def test_the_string_id_cache_never_answers_for_another_string(tmp_path):
    """RowBuffer keeps the ids of the strings it met last by the str's address; strings made and
    freed by the thousand (each address reused by the next one), equal strings as distinct
    objects, and more strings than the cache holds still decode to exactly the rows appended,
    over several takes (the definitions carry over). A cache of borrowed addresses fails it."""
    proc = _child("""
        from collections import deque
        from jaxplace_cli.model._packed import RowBuffer, Decoder

        def row_of(i):
            a = "dev:%d" % (i % 700)          # a fresh object each time
            b = "".join(["na", "me"])         # equal, distinct objects
            return (i, a, b, ("x%d" % (i * 7 % 1009), i), None, True)

        rb = RowBuffer(); s = rb.sink(1, deque()); dec = Decoder()
        got = []
        for batch in range(4):
            for i in range(batch * 3000, batch * 3000 + 3000):
                s.append(row_of(i))  # freed after its row: its address is reused by the next
            got.extend(dec.decode(rb.take()[0])[1])
        print(got == [row_of(i) for i in range(12000)], len(got))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "12000"]
