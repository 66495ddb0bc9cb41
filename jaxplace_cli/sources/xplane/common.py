"""The model every part of the trace reader shares: the result (:class:`TraceData`), its one
error type (:class:`TraceError`), a transfer candidate before pairing and numbering
(:class:`Copy`), and helpers that read stats without trusting them."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.events import TransferEvent

TRACE_SUFFIX = ".xplane.pb"
HINT = "pass a .xplane.pb file or a jax.profiler log dir"


class TraceError(JaxplaceError):
    """A trace path or file jaxplace cannot read. The message is one line: what is wrong and
    what to do, so the CLI can print it as is instead of a traceback."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


@dataclass
class TraceData:
    """What one host's trace file says, in jaxplace's terms.

    ``devices`` come from the ``/device:<KIND>:<N>`` planes (``gpu:0``, ``tpu:3``; custom planes
    are skipped); a CPU-only trace has no device plane, so its devices come from the
    ``device_ordinal`` of executed HLO ops (``cpu:0``). ``device_op_ns``/``device_op_count``
    sum one line family per device so no time is counted twice: the ``Stream #N`` lines of a
    GPU (kernels; copies excluded), else the ``XLA Ops`` line (TPU; host-offload copies
    excluded), else, for CPU, host events that carry ``hlo_op`` and ``device_ordinal``. The
    ``XLA Modules``, ``Steps``, ``TensorFlow Ops``/``Name Scope`` lines repeat that time and are
    not summed. ``step_count`` is the largest number of events on any device's ``Steps`` line
    (each device repeats the steps), None without one. ``offload_transfers`` holds XLA
    host-offload copies (see the package doc), apart from ``transfers``. ``notes`` state, in
    plain words, everything that is unknown or was assumed.
    """

    host: str
    path: Path
    devices: list[str]
    transfers: list[TransferEvent]
    device_op_ns: dict[str, int]
    device_op_count: dict[str, int]
    step_count: int | None
    source: str
    notes: list[str] = field(default_factory=list)
    offload_transfers: list[TransferEvent] = field(default_factory=list)


class Copy:
    """A transfer candidate before pairing and numbering. ``kind`` is None until a ROCm blit
    kernel learns its direction from its host call; ``corr``/``ctx`` are the correlation and
    context ids that pair a device copy with its host call."""

    __slots__ = ("ts", "kind", "src", "dst", "bytes", "blocking", "api", "corr", "ctx",
                 "paired", "hlo_op", "assumed_kind")

    def __init__(self, ts, kind, src, dst, nbytes, blocking, api, corr=None, ctx=None):
        self.ts, self.kind, self.src, self.dst = ts, kind, src, dst
        self.bytes, self.blocking, self.api = nbytes, blocking, api
        self.corr, self.ctx = corr, ctx
        self.paired = False
        self.hlo_op = False
        self.assumed_kind = False


def details(s) -> dict[str, str]:
    """``'kind:Unknown size:0 dest:512 async:1'`` -> dict of strings."""
    out = {}
    if isinstance(s, str):
        for part in s.split():
            k, sep, v = part.partition(":")
            if sep:
                out[k] = v
    return out


INT64 = 2**63  # a trace's integers are int64: a value outside it is input damage, as absent


def to_int(v, default=None):
    """``int(v)``, or ``default`` for anything that is not an int64: a 4,000-digit ``size:``
    in a hostile trace overflowed every float conversion later (exit 3), and converting it costs
    time quadratic in its length."""
    if isinstance(v, str) and len(v) > 24:
        return default
    try:
        n = int(v)
    except (TypeError, ValueError, OverflowError):
        return default
    return n if -INT64 <= n < INT64 else default


def stats(obj) -> dict:
    """The stats of an event or plane as a dict. ProfileData hands bytes stats over as
    UTF-8-decoded str, so a binary value that is not UTF-8 (a serialized proto with a byte
    >= 0x80, ...) raises UnicodeDecodeError: that one stat is skipped, not the whole trace."""
    try:
        return dict(obj.stats)
    except UnicodeDecodeError:
        pass
    out, it = {}, iter(obj.stats)
    for _ in range(1_000_000):  # the iterator moves past a stat it cannot convert
        try:
            k, v = next(it)
        except StopIteration:
            break
        except UnicodeDecodeError:
            continue
        out[k] = v
    return out


