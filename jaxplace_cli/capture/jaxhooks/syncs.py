"""Did a host read make the host wait for the device? ("blocking" on a d2h transfer.)

A read blocks when the value is still being computed *and* nothing is queued on its device
behind it: the host waits while the device drains its queue, then the device idles until the
host dispatches again — the stall that ``float(loss)`` after every step causes. jaxplace
decides it from the order of dispatches and waits it recorded (a model of the device's
in-order queue), per device:

* ``tail[dev]``: the first buffer id made by the newest op dispatched to ``dev``;
* ``synced[dev]``: the newest buffer id the host already waited for on ``dev`` (every value
  made before it is finished: a device runs its queue in order).

* ``progs[dev]``: the buffer ids ``[first, end)`` the newest compiled program (a jit call)
  made there (``program``).

A read of a value whose id is ``<= synced`` is already computed: not blocking (the second and
third array of ``print({"a": a, "b": b, "c": c})`` after the first one waited). A read of a
value older than the tail finds later work queued: the host waits but the device stays busy
(a logger reading the previous step's loss after dispatching this step): not blocking — unless
the value is the newest program's and only eager work was queued behind it (``total = total +
loss`` or a ``jax.random.split`` before ``float(loss)``): that work is done long before the host
dispatches the next step, so the device idles as with nothing queued (a review found every
such per-step read missed, 2026-12-07). A read of the tail's value waits and then leaves the
device idle: blocking.

Why a model and not only ``Array.is_ready()``: on the CPU backend the client runs small
programs inline in the dispatching thread, so ``is_ready()`` right after a call says more
about that heuristic than about waiting (measured here: for a 3-matmul step at n=64, 15 of 20
results were ready when ``float()`` ran, at n=8 and n=256 none). On other platforms
``is_ready()`` is measured before the read and a ready value is never blocking.
"""
from __future__ import annotations

from jaxplace_cli.capture.memory import peek_seq  # itertools.count's value: its repr (no pickling: gone in 3.14)


def dispatched(rec, dev: str, buf: int) -> None:
    """An op (or an upload) made ``buf`` on ``dev``: it is now the newest work there."""
    if buf:
        rec.tail[dev] = buf


def read_blocks(rec, arr, dev: str, buf: int, ready: bool | None = None) -> bool:
    """Whether the host waited on ``arr`` (buffer ``buf`` on ``dev``) with the device's queue
    empty behind it; records the wait. ``ready``: ``is_ready()`` measured before the read
    (None when not measured)."""
    if buf and buf <= rec.synced.get(dev, 0):
        return False  # the host already waited for something newer on this device
    if ready:
        waited(rec, dev, buf)
        return False
    if buf and buf < rec.tail.get(dev, 0):
        prog = rec.progs.get(dev)
        if prog is None or not prog[0] <= buf < prog[1]:
            # later work is queued behind it: the host waits, the device stays busy
            rec.synced[dev] = max(rec.synced.get(dev, 0), buf)
            return False
        # the newest program's value, eager work behind it: the device idles soon after
    waited(rec, dev, buf)
    return True


def program(rec, before: int, end: int | None = None) -> None:
    """A jit call was dispatched and its rows made; ``before``/``end``: the buffer-id counter
    before and after them (``end`` read here when not given: the C path reads both). On each
    device where it is the newest work (its tail moved), it is the newest program."""
    if end is None:
        end = peek_seq(rec.buf_ids)
    if before < 0 or end < 0:
        return  # a counter that could not be read: no program noted, as before this model knew them
    for dev, first in tuple(rec.tail.items()):  # a snapshot: another thread may add a device
        if first >= before:
            rec.progs[dev] = (first, end)


def waited(rec, dev: str, buf: int) -> None:
    """The host waited for ``buf`` on ``dev`` (a read or ``block_until_ready``)."""
    if not buf or buf >= rec.tail.get(dev, 0):
        rec.synced[dev] = next(rec.buf_ids)  # everything made so far is finished
    else:
        rec.synced[dev] = max(rec.synced.get(dev, 0), buf)


def measure_ready(arr, dev: str):
    """``arr.is_ready()`` where it means "the host will not wait" (not on CPU, see above)."""
    if dev.startswith("cpu"):
        return None
    try:
        return bool(arr.is_ready())
    except Exception:
        return None
