"""The raw rows the capture hot path appends, before the store formats them.

Hooks run on the user's dispatching thread, so they append the cheapest tuple that captures a
fact and leave formatting to ``store/rows.py`` (in the writer process). This module is the one
description of those tuples: capture writes them, the store reads them, by these names.

- An op row is an ``OpEvent`` in field order whose ``in_bufs``/``out_bufs`` may still be an int
  or a tuple of ints (the store joins them into text).
- An eager op whose result is a buffer jaxplace has not seen appends three more fields
  (``OP_WITH_RESULT`` long): the result's shape tuple, ``(dtype name, itemsize)`` and
  committed flag; the store turns them into that buffer's ``BufferEvent`` (one tuple per op,
  not three: GC-tracked objects per eager op 4.7 -> 1.7).
- A transfer row is a ``TransferEvent`` in field order, then the node of its call stack (issue
  28: ``Recorder.stack_of``, 0 = none); the store keeps that as a ``TransferStack`` row.
- A buffer row is ``(buf, seq, device, shape tuple, (dtype name, itemsize), committed, site)``.
- Frees (issue 27, capture/memory.py) come as ``bytes``: ``buf, seq, how code`` as three native
  int64 a free (no object per free for the cycle collector); ``frees_rows`` makes the rows.
"""
from __future__ import annotations

import operator
import struct

from jaxplace_cli.model.events import OpEvent

OP_FIELDS = len(OpEvent._fields)  # 13
OP_IN_BUFS = OpEvent._fields.index("in_bufs")
OP_OUT_BUFS = OpEvent._fields.index("out_bufs")
RESULT_SHAPE, RESULT_DTYPE, RESULT_COMMITTED = OP_FIELDS, OP_FIELDS + 1, OP_FIELDS + 2
OP_WITH_RESULT = OP_FIELDS + 3  # 16

# -- packed rows (model/_packed.c) ------------------------------------------------------------
# A batch of ``Recorder.take()`` may also hold ``"packed": (bytes, rows)``: rows the native hot
# path encoded as it made them (a RowBuffer), in the tables below; ``unpack`` turns them back
# into the tuples above, with a Decoder that has seen every earlier batch of the same recorder.
PACKED = "packed"
PACKED_TABLES = ("ops", "transfers", "buffers")


def batch_rows(batch: dict) -> int:
    """Rows a batch carries, packed ones included."""
    n = sum(len(v) // FREE_ROW.size if isinstance(v, (bytes, bytearray)) else len(v)
            for k, v in batch.items() if k != PACKED)
    return n + (batch[PACKED][1] if PACKED in batch else 0)


def unpack(batch: dict, decoder) -> dict:
    """``batch`` with its packed rows decoded into its lists; each table's rows then in seq
    order, whichever path made them (native rows and the Python hooks' rows of one batch)."""
    packed = batch.pop(PACKED, None)
    if packed is not None:
        for name, rows in zip(PACKED_TABLES, decoder.decode(packed[0])):
            if rows:
                batch[name] = [*batch[name], *rows]
    for name in ("ops", "transfers"):  # both paths alike (two threads interleave their appends)
        batch[name].sort(key=_SEQ)
    return batch


_SEQ = operator.itemgetter(0)  # every op and transfer row starts with its seq


def packed_module():
    """``jaxplace_cli.model._packed`` (RowBuffer, Decoder), or None where it was not built."""
    try:
        from jaxplace_cli.model import _packed
    except ImportError:
        return None
    return _packed


FREE_HOW = ("gc", "delete", "donated")  # FreeEvent.how by its code
FREE_ROW = struct.Struct("=qqq")  # buf, seq, how code (native int64, as capture/_native.c writes them)


def frees_rows(packed) -> list[tuple[int, int, str]]:
    """The recorder's packed frees (or rows already made, or None) -> ``FreeEvent`` rows."""
    if not isinstance(packed, (bytes, bytearray)):
        return list(packed or ())
    return [(b, seq, FREE_HOW[how]) for b, seq, how in FREE_ROW.iter_unpack(packed)]
