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
- A buffer row is ``(buf, seq, device, shape tuple, (dtype name, itemsize), committed, site)``.
"""
from __future__ import annotations

from jaxplace_cli.model.events import OpEvent

OP_FIELDS = len(OpEvent._fields)  # 13
OP_IN_BUFS = OpEvent._fields.index("in_bufs")
OP_OUT_BUFS = OpEvent._fields.index("out_bufs")
RESULT_SHAPE, RESULT_DTYPE, RESULT_COMMITTED = OP_FIELDS, OP_FIELDS + 1, OP_FIELDS + 2
OP_WITH_RESULT = OP_FIELDS + 3  # 16
