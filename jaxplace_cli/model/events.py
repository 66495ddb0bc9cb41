"""The event model: every other module imports these definitions, nothing re-parses strings.

Events are NamedTuples, not dataclasses, because the hooks create one per JAX dispatch on the
user's hot path: a tuple is the cheapest object Python can build, and SQLite's
``executemany`` consumes tuples directly. The field order *is* the storage column order, so
the SQLite schema (``store/schema.py``) is generated from these definitions.

Identities:
- ``seq``: one global, monotonically increasing sequence number shared by ops and transfers,
  so their relative order is known even across threads.
- ``buf``: a buffer identity assigned by jaxplace to every jax.Array it sees (0 = unknown);
  ops list the buffers they read and wrote, transfers name the buffer they moved, which is
  what lets analyses follow data from op to op (ping-pong, uncommitted copies).
- ``site``: an interned (file, line, function) of the first stack frame in user code.
"""
from __future__ import annotations

from typing import NamedTuple

# Transfer kinds.
H2D = "h2d"
D2H = "d2h"
D2D = "d2d"
TRANSFER_KINDS = (H2D, D2H, D2D)

# Where a host-side value comes from, for ``src``/``dst`` of host transfers.
HOST = "host"

# Op kinds: what kind of Python entry point dispatched the computation.
OP_JIT = "jit"  # a call of a user jax.jit function
OP_JNP = "jnp"  # a jax.numpy / jax.nn / jax.random ... function called eagerly
OP_METHOD = "method"  # an Array method or operator (x + y, x.sum(), x[0])
OP_PRIM = "prim"  # a primitive bound eagerly outside any hooked call (lax.*, grad outside jit)
OP_DEVICE_PUT = "device_put"
OP_DEVICE_GET = "device_get"
OP_SEGMENT = "segment"  # a piece of a jitted function placed on its own (--granularity op)
# Ops that move data rather than compute: the balance and fwd/bwd rules skip them.
TRANSFER_OPS = (OP_DEVICE_PUT, OP_DEVICE_GET)


class Site(NamedTuple):
    """The first stack frame in the user's code: what every finding points at."""

    id: int
    file: str
    line: int
    function: str


class OpEvent(NamedTuple):
    """One dispatched computation (or an explicit device_put/device_get call).

    ``dur_ns`` is host-side dispatch time: JAX dispatches asynchronously, so device execution
    time lives in the profiler trace, not here. ``devices`` is a comma-joined list of device
    labels (``cpu:0``), ``in_bufs``/``out_bufs`` comma-joined buffer ids. ``error`` is the
    exception text when the call raised, else empty.
    """  # noqa: D205

    seq: int
    ts_ns: int
    dur_ns: int
    thread: int
    kind: str
    name: str
    devices: str
    site: int
    in_bufs: str
    out_bufs: str
    error: str
    backward: bool  # a backward-pass (transpose) op, from JAX's name stack
    placed: str  # what placed it: "" = JAX decided, else the policy decision ("rr", "rule 2")


class TransferEvent(NamedTuple):
    """Array bytes moving between host memory and a device, or between two devices.

    ``implicit`` = the user did not ask for the move (a numpy argument to a jit call, an
    uncommitted array pulled onto another device, a Python scalar operand). ``blocking`` = the
    host waited for the device (device-to-host reads such as ``float(x)``). ``op_seq`` links
    the transfer to the op that caused it (0 when none), ``api`` names the API that caused it.
    """

    seq: int
    ts_ns: int
    thread: int
    kind: str
    src: str
    dst: str
    bytes: int
    implicit: bool
    blocking: bool
    api: str
    site: int
    buf: int
    op_seq: int


class StackNode(NamedTuple):
    """One frame of the user's call stacks (issue 28), interned as a trie: ``node``'s frame is
    ``file:line`` in ``function``, called from ``parent``'s frame (0: the outermost user frame).
    A node stands for the whole stack from the outermost user frame down to its own, so a
    transfer names its stack with one id (``TransferStack``); its leaf is the transfer's site.
    Frames are not ``Site`` rows: site ids stay those of the events' first user frames."""

    node: int
    parent: int
    file: str
    line: int
    function: str


class TransferStack(NamedTuple):
    """The call stack (a ``StackNode``) a transfer was made under, by the transfer's ``seq``.
    A table of its own so that ``TransferEvent`` and the stores written before it stay as they
    are; a transfer without a row here has only its ``site`` (so one made in a single user
    frame, that site, gets none: capture/stacks.py)."""

    seq: int
    node: int


class BufferEvent(NamedTuple):
    """A jax.Array first seen by jaxplace: where it lives and what it holds."""

    buf: int
    seq: int
    device: str
    shape: str
    dtype: str
    bytes: int
    committed: bool
    site: int


class FreeEvent(NamedTuple):
    """A tracked buffer released (issue 27): its ``BufferEvent`` is the allocation, this row the
    end of its life. ``how``: ``gc`` (the last reference went), ``delete`` (``Array.delete()``),
    ``donated`` (consumed by a jit call's ``donate_argnums``). ``seq`` is the next event's (a
    free draws none): the free came before that event. A buffer without one was still live when
    the script ended (or freed after recording stopped)."""

    buf: int
    seq: int
    how: str


class ShardEvent(NamedTuple):
    """One device's part of a buffer that spans several devices (a sharded or replicated
    array): ``bytes`` is what that device holds, so device memory is counted per shard."""

    buf: int
    device: str
    bytes: int


class Marker(NamedTuple):
    """Out-of-band facts: step boundaries, hook fallbacks, notes. ``value`` is free text."""

    seq: int
    ts_ns: int
    kind: str
    value: str


# Marker kinds with a structured value.
MARKER_COMPILE = "compile"  # value: JSON written by capture/jaxhooks/compiles.py
MARKER_OOM = "oom"  # value: JSON {site, device, bytes, error} of an allocation that failed (capture/memory.py)
MARKER_MEMORY_STATS = "memory_stats"  # value: JSON {device: [bytes_in_use, peak_bytes_in_use]}

# Host data uploaded again (issue 26): value is JSON written by capture/jaxhooks/host_data.py,
# {id, arg, var, made, shape, dtype}; ``id`` is the (negative) ``buf`` of its implicit h2d transfers,
# or an id of a ``host_put`` marker (an explicit put's transfers hold the device buffer).
MARKER_HOST_DATA = "host_data"
# An explicit ``jax.device_put`` of NumPy data (the repeated-put rule): value is JSON {op, ids}, the put's
# op seq and the host identities it uploaded (capture/jaxhooks/uploads.py; host_data.py's ids).
MARKER_HOST_PUT = "host_put"
# The source text of a site's line (issue 26, ``diff``): value is JSON ``[site id, text]``,
# written by capture/recorder.py when the site is first seen; seq 0.
MARKER_SITE_TEXT = "site-text"


class CompileInfo(NamedTuple):
    """One XLA compilation, decoded from a ``compile`` marker's JSON value (not a table: the
    store keeps it as marker text, ``store.queries.compiles`` reads and checks it).

    ``op_seq``/``op``/``site``/``signature`` describe the recorded op in flight when the
    compile happened (0 / "" / 0 / () when none, e.g. a compile outside any hooked call);
    ``signature`` is one string per argument leaf of that call (``float32[8,128] weak
    @cpu:0``, ``numpy float32[8]``, ``int 3``), which the recompile rule diffs.
    """

    seq: int  # the marker's seq
    fun: str  # the compiled function's name as JAX reports it
    secs: float  # backend compile time, seconds (finite, >= 0)
    op: str
    op_seq: int
    site: int
    signature: tuple[str, ...]


def device_label(device) -> str:
    """Stable device name such as ``cpu:0`` or ``gpu:1``; ids are global across processes."""
    return f"{device.platform}:{device.id}"


def device_group_label(labels) -> str:
    """One transfer endpoint for several devices (a sharded or replicated array): the device
    ids per platform as ranges, ``cpu:0-7``, ``cpu:0+2+5``, ``cpu:0-3+gpu:0``. It holds no
    ``,`` and no ``>``, so a route ``host>cpu:0-7`` splits like any other ``src>dst``
    (``expand_device_group`` gives the devices back). One label is returned unchanged."""
    labels = list(dict.fromkeys(labels))
    if len(labels) == 1:
        return labels[0]
    by_platform: dict = {}
    for lab in labels:
        platform, _, num = lab.rpartition(":")
        if not platform or not num.isdigit():
            return "+".join(sorted(labels))  # not platform:id labels: listed as they are
        by_platform.setdefault(platform, set()).add(int(num))
    parts = []
    for platform in sorted(by_platform):
        runs: list[list[int]] = []
        for i in sorted(by_platform[platform]):
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        parts.append(f"{platform}:" + "+".join(str(a) if a == b else f"{a}-{b}" for a, b in runs))
    return "+".join(parts)


def expand_device_group(label: str) -> list[str]:
    """The device labels of an endpoint: ``cpu:0-2+5`` -> cpu:0, cpu:1, cpu:2, cpu:5; ``host``
    and a single label come back as a one-element list."""
    out, platform = [], ""
    for part in label.split("+"):
        if ":" in part:
            platform, _, part = part.rpartition(":")
        lo, sep, hi = part.partition("-")
        if platform and lo.isdigit() and (not sep or hi.isdigit()):
            out += [f"{platform}:{i}" for i in range(int(lo), int(hi if sep else lo) + 1)]
        else:
            out.append(f"{platform}:{part}" if platform else part)
    return out

