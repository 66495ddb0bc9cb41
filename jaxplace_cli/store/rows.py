"""Raw capture rows (model/raw.py) -> rows in the store's column order.

Pure, and run wherever the store is written: in the writer process for ``jaxplace run`` (so
the user's threads never pay for it), in-process for ``budget()`` and ``device_placement``.
"""
from __future__ import annotations

from jaxplace_cli.model.events import BufferEvent, OpEvent, TransferEvent
from jaxplace_cli.model.raw import (
    FREE_HOW,
    FREE_ROW,
    OP_FIELDS,
    OP_IN_BUFS,
    OP_OUT_BUFS,
    OP_WITH_RESULT,
    RESULT_COMMITTED,
    RESULT_DTYPE,
    RESULT_SHAPE,
    frees_rows,
)

_SHAPE_FORMATS: dict = {}  # shape -> ("32x128", element count)
_SEQ = OpEvent._fields.index("seq")
_DEVICES = OpEvent._fields.index("devices")
_SITE = OpEvent._fields.index("site")
_TRANSFER_FIELDS = len(TransferEvent._fields)
# the indices store/_sqlite.c's finish_core reads rows by (the contract stays defined here once)
_LAYOUT = (OP_FIELDS, OP_IN_BUFS, OP_OUT_BUFS, _SEQ, _DEVICES, _SITE, _TRANSFER_FIELDS,
           RESULT_SHAPE, RESULT_DTYPE, RESULT_COMMITTED, OP_WITH_RESULT)


def _native_core():
    """store/_sqlite.c's finish_core and frees_core, where it was built and the layout is the
    one they assume (in_bufs and out_bufs side by side; a free is three int64)."""
    if OP_OUT_BUFS != OP_IN_BUFS + 1 or FREE_ROW.format != "=qqq":
        return None, None
    try:
        from jaxplace_cli.store._sqlite import finish_core, frees_core
    except ImportError:
        return None, None
    return finish_core, frees_core


_CORE, _FREES = _native_core()


def finish_rows(batch: dict[str, list]) -> dict[str, list]:
    """Raw rows of ``Recorder.take()`` -> rows in the store's column order: in C where built
    (store/_sqlite.c: 0.38 -> 0.07 µs a row, bench/bench_writer.py), which hands any row it
    does not know back to the Python below, the whole batch."""
    done = None
    if _CORE is not None and type(batch["ops"]) is list and type(batch["transfers"]) is list \
            and type(batch["buffers"]) is list:
        done = _CORE(batch["ops"], batch["transfers"], batch["buffers"], _SHAPE_FORMATS, _LAYOUT)
    if done is None:
        return python_finish_rows(batch)
    ops, transfers, stacks, buffers = done
    return _assemble(batch, ops, transfers, stacks, buffers)


def _assemble(batch, ops, transfers, stacks, buffers) -> dict[str, list]:
    return {
        "sites": batch["sites"],
        "stacks": batch.get("stacks") or [],
        "transfer_stacks": stacks,
        "ops": ops,
        "transfers": transfers,
        "buffers": buffers,
        "markers": batch["markers"],
        "frees": _frees(batch.get("frees")),
        "shards": batch.get("shards") or [],
    }


def _frees(packed) -> list:
    """``frees_rows`` (model/raw.py), in C for whole packed rows of known kinds."""
    if _FREES is not None and type(packed) is bytes and len(packed) % FREE_ROW.size == 0:
        rows = _FREES(packed, FREE_HOW)
        if rows is not None:
            return rows
    return frees_rows(packed)


def python_finish_rows(batch: dict[str, list]) -> dict[str, list]:
    """``finish_rows`` in Python: the reference the C one is tested against, and its fallback."""
    formats = _SHAPE_FORMATS
    buffers = []

    def add_buffer(b, seq, device, shape, dtype_s, itemsize, committed, site):
        fmt = formats.get(shape)
        if fmt is None:
            n = 1
            for d in shape:
                n *= d
            fmt = formats[shape] = ("x".join(map(str, shape)) if shape else "scalar", n)
        buffers.append(BufferEvent(b, seq, device, fmt[0], dtype_s, fmt[1] * itemsize,
                                   bool(committed), site))

    ops = []
    for op in batch["ops"]:
        if type(op[OP_IN_BUFS]) is str and type(op[OP_OUT_BUFS]) is str:
            ops.append(op)
            continue
        if len(op) == OP_WITH_RESULT:
            dtype_s, itemsize = op[RESULT_DTYPE]
            add_buffer(op[OP_OUT_BUFS], op[_SEQ], op[_DEVICES], op[RESULT_SHAPE], dtype_s, itemsize,
                       op[RESULT_COMMITTED], op[_SITE])
        ops.append((*op[:OP_IN_BUFS], _ids(op[OP_IN_BUFS]), _ids(op[OP_OUT_BUFS]),
                    *op[OP_OUT_BUFS + 1:OP_FIELDS]))
    for b, seq, device, shape, (dtype_s, itemsize), committed, site in batch["buffers"]:
        add_buffer(b, seq, device, shape, dtype_s, itemsize, committed, site)
    transfers, stacks = _split_stacks(batch["transfers"])
    return _assemble(batch, ops, transfers, stacks, buffers)


def _split_stacks(rows: list) -> tuple[list, list]:
    """Transfer rows with their stack node (model/raw.py) -> (TransferEvent rows, TransferStack
    rows); a row without a node (0, or none appended) has no TransferStack row."""
    n = _TRANSFER_FIELDS
    transfers, stacks = [], []
    for t in rows:
        if len(t) > n:
            if t[n]:
                stacks.append((t[0], t[n]))
            t = t[:n]
        transfers.append(t)
    return transfers, stacks


def _ids(bufs) -> str:
    """Buffer ids as stored: hooks leave one id (an int), several (a tuple) or the text."""
    t = type(bufs)
    if t is str:
        return bufs
    if t is int:
        return str(bufs)
    return ",".join(map(str, bufs))
