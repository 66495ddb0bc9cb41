"""store/_sqlite.c's finish_core/frees_core against store/rows.py's Python finish_rows (issue 29
item 3): the same rows for what the recorder really makes, and for every row shape the C does
not know, the Python's own result (or its own exception) through the fallback."""
import pickle

import jax
import jax.numpy as jnp
import pytest

from jaxplace_cli.capture.recorder import Recorder
from jaxplace_cli.capture.recording import Recording
from jaxplace_cli.model.raw import FREE_ROW, OP_FIELDS, OP_IN_BUFS, OP_WITH_RESULT, packed_module, unpack
from jaxplace_cli.store import rows as R

pytestmark = pytest.mark.skipif(R._CORE is None, reason="store/_sqlite.c not built")


def _recorded_batches() -> list[dict]:
    """Raw batches as the writer process receives them: eager ops (with results), a jit with
    many outputs, uploads, a host round trip, frees, a multi-device result where there are
    several devices."""
    rec = Recorder()
    rec.attach_writer(lambda: None, 10**9)
    recording = Recording(rec, "all")
    recording.start()
    frames = []
    try:
        @jax.jit
        def wide(x, *scalars):
            return tuple(x * s for s in scalars)

        x = jnp.ones((4, 3), jnp.float32)
        for i in range(60):
            x = x * 0.5 + 1.0
            outs = wide(x, 1.0, 2.0, 3.0)
            y = jnp.asarray([float(i), 2.0])  # an upload
            float(y.sum())  # a download
            del outs
            if i % 20 == 19:
                frames.append(pickle.dumps(rec.take()))
        s = jnp.float32(3.0) * 2  # a scalar result: shape ()
        frames.append(pickle.dumps(rec.take()))
        del s
    finally:
        recording.stop()
    frames.append(pickle.dumps(rec.take()))
    decoder = packed_module().Decoder() if packed_module() else None
    return [unpack(pickle.loads(f), decoder) for f in frames]


def test_recorded_rows_finish_alike():
    batches = _recorded_batches()
    assert sum(len(b["ops"]) for b in batches) > 100 and sum(len(b["buffers"]) for b in batches) > 50
    for b in batches:
        want = R.python_finish_rows({k: (list(v) if isinstance(v, list) else v) for k, v in b.items()})
        got_core = R._CORE(b["ops"], b["transfers"], b["buffers"], {}, R._LAYOUT)
        assert got_core is not None  # the recorder's own rows are all ones the C knows
        assert R.finish_rows(b) == want
        assert [type(v) for v in R.finish_rows(b)["buffers"]] == [tuple] * len(want["buffers"])


def _op(in_bufs, out_bufs, result=None):
    row = [7, "add", "eager", "cpu:0", "f.py:3", 120, in_bufs, out_bufs, "", 0, "", 0, ""][:OP_FIELDS]
    row[OP_IN_BUFS], row[OP_IN_BUFS + 1] = in_bufs, out_bufs
    return tuple(row) + (result or ())


def _batch(ops=(), transfers=(), buffers=(), frees=None):
    return {"sites": [], "stacks": [], "ops": list(ops), "transfers": list(transfers),
            "buffers": list(buffers), "markers": [], "frees": frees, "shards": []}


EDGE_CASES = {
    "text ids": _batch([_op("1,2", "3")]),
    "int and tuple ids": _batch([_op((1, 2, 2**70), 5)]),
    "empty tuple ids": _batch([_op((), 5)]),
    "with a result": _batch([_op(4, 9, ((2, 3), ("float32", 4), True))]),
    "a scalar result": _batch([_op(4, 9, ((), ("int8", 1), 0))]),
    "a zero-size result": _batch([_op(4, 9, ((0, 5), ("float32", 4), 1))]),
    "a negative dimension": _batch([_op(4, 9, ((-1, 5), ("float32", 4), 1))]),
    "a shape past int64": _batch([_op(4, 9, ((2**40, 2**40), ("float32", 4), 1))]),
    "a list shape": _batch(buffers=[(1, 2, "cpu:0", [2, 2], ("f32", 4), 1, "s")]),
    "a float dimension": _batch(buffers=[(1, 2, "cpu:0", (2.0, 3), ("f32", 4), 1, "s")]),
    "a list dtype pair": _batch(buffers=[(1, 2, "cpu:0", (2, 3), ["f32", 4], 1, "s")]),
    "a short buffer row": _batch(buffers=[(1, 2, "cpu:0", (2, 3), ("f32", 4), 1)]),
    "a list op": _batch([list(_op(1, 2))]),
    "a bool id": _batch([_op(True, 2)]),
    "a str subclass id": _batch([_op(type("S", (str,), {})("12"), 2)]),
    "an op of another length": _batch([_op(1, 2) + ("x",)]),
    "transfers with and without a node": _batch(transfers=[(1, "h2d"), (2, "d2h", 5), (3, "d2d", 0)]),
    "a list transfer": _batch(transfers=[[1, "h2d", 5]]),
    "packed frees": _batch(frees=FREE_ROW.pack(5, 6, 0) + FREE_ROW.pack(7, 8, 2)),
    "a negative free kind": _batch(frees=FREE_ROW.pack(5, 6, -1)),
    "a free kind past the names": _batch(frees=FREE_ROW.pack(5, 6, 3)),
    "part of a free": _batch(frees=FREE_ROW.pack(5, 6, 0)[:-1]),
    "frees as rows": _batch(frees=[(1, 2, "gc")]),
}


# the edge cases the C makes itself (the others go to the Python, the whole batch)
C_KNOWS = {"text ids", "int and tuple ids", "empty tuple ids", "with a result", "a scalar result",
           "a zero-size result", "a negative dimension", "transfers with and without a node",
           "packed frees", "a negative free kind", "a free kind past the names", "part of a free",
           "frees as rows"}


def _outcome(fn, batch):
    try:
        return fn(batch)
    except Exception as exc:  # noqa: BLE001 - the exception is the outcome compared
        return (type(exc), str(exc))


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_edge_rows_finish_as_the_python_does(case, monkeypatch):
    """Each edge case through finish_rows (C where it can) and through the Python alone, each
    with a fresh shape cache: the same rows, or the same exception."""
    import copy

    batch = EDGE_CASES[case]
    c_made = R._CORE(batch["ops"], batch["transfers"], batch["buffers"], {}, R._LAYOUT) is not None
    assert c_made == (case in C_KNOWS)  # which side made the rows compared below
    monkeypatch.setattr(R, "_SHAPE_FORMATS", {})
    got = _outcome(R.finish_rows, copy.deepcopy(batch))
    monkeypatch.setattr(R, "_SHAPE_FORMATS", {})
    want = _outcome(R.python_finish_rows, copy.deepcopy(batch))
    assert got == want
    assert OP_WITH_RESULT == OP_FIELDS + 3  # the result's three fields the C reads


def test_the_c_shape_cache_is_the_python_one(monkeypatch):
    """A shape cached by either side is read by the other as it is (one cache, one format)."""
    cache = {}
    monkeypatch.setattr(R, "_SHAPE_FORMATS", cache)
    R.finish_rows(_batch([_op(4, 9, ((2, 3), ("float32", 4), True))]))
    assert cache == {(2, 3): ("2x3", 6)}
    cache[(5,)] = ("five", 50)  # whatever the cache says is used
    out = R.finish_rows(_batch(buffers=[(1, 2, "cpu:0", (5,), ("f32", 4), 1, "s")]))
    assert out["buffers"] == [(1, 2, "cpu:0", "five", "f32", 200, True, "s")]
    assert R._CORE([], [], [(1, 2, "cpu:0", (5,), ("f32", 4), 1, "s")], cache, R._LAYOUT) is not None
