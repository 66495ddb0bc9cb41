"""Raw capture rows (model/raw.py) -> rows in the store's column order.

Pure, and run wherever the store is written: in the writer process for ``jaxplace run`` (so
the user's threads never pay for it), in-process for ``budget()`` and ``device_placement``.
"""
from __future__ import annotations

from jaxplace_cli.model.events import BufferEvent, OpEvent, TransferEvent
from jaxplace_cli.model.raw import (
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


def finish_rows(batch: dict[str, list]) -> dict[str, list]:
    """Raw rows of ``Recorder.take()`` -> rows in the store's column order."""
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
    return {
        "sites": batch["sites"],
        "stacks": batch.get("stacks") or [],
        "transfer_stacks": stacks,
        "ops": ops,
        "transfers": transfers,
        "buffers": buffers,
        "markers": batch["markers"],
        "frees": frees_rows(batch.get("frees")),
        "shards": batch.get("shards") or [],
    }


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
