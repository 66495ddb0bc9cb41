"""Read any ``jax.profiler`` trace (``*.xplane.pb``) into jaxplace's event model.

A trace is an XSpace protobuf: planes (``/host:CPU``, ``/device:GPU:0``, ``/device:TPU:0``,
...) hold lines (threads, GPU streams, derived lines such as ``XLA Ops``), lines hold events
with a name, a start, a duration and typed stats. ``jax.profiler.ProfileData`` parses it
natively; this module makes one pass over the events, looks at the stats of the few events
that can be transfers, and returns one :class:`TraceData` per host file.

What counts as a transfer, and how each is counted once
------------------------------------------------------
Profilers often record one copy twice: the host API call that enqueued it and the device
activity that executed it, linked by the ``correlation_id`` stat. The rule is:

1. Device-side copy events are the transfers: ``MemcpyH2D``/``MemcpyD2H``/``MemcpyD2D``/
   ``MemcpyP2P`` (CUPTI, TF), ``CopyHostToDevice``/``CopyDeviceToHost``/``CopyDeviceToDevice``
   (ROCm), with ``memcpy_details`` such as ``'size:6144 dest:4 async:1'``; and ROCm
   ``__amd_rocclr_copyBuffer*`` blit kernels, which are copies without any size.
2. A host memcpy call (``cuMemcpy*``, ``cudaMemcpy*``, ``hipMemcpy*``, or a host event named
   like rule 1) whose ``correlation_id`` (and ``context_id`` when both sides carry one) matches
   a device-side copy is the same transfer: it is not counted again, but it fills in what the
   device event lacks (the direction of a ``copyBuffer`` kernel, a size, the ``async`` flag).
3. A host memcpy call with no device-side counterpart is counted from the host event (the
   device activity was not captured).
4. TPU: ``tpu::System::TransferToDevice`` / ``TransferFromDevice`` host events (stats ``size``,
   ``device_ordinal``). Their ``=>IssueEvent`` and ``=>IssueEvent=>Done`` variants describe the
   same transfer and are skipped.
5. XLA host-offload copies: ``copy-start`` ops on an ``XLA Ops`` line whose operand or result
   lives in memory space ``S(5)`` (host memory). They move real bytes but are compiled into the
   program rather than requested, so they are kept apart in ``TraceData.offload_transfers``.

Sizes: a size the trace does not state is ``bytes=-1`` (``size:0`` in ROCm's
``memcpy_details`` means "not recorded", not "zero bytes"). Nothing is guessed; the one
derived size is the logical byte size of an HLO shape for offload copies, and notes say so.

TransferEvent fields of trace-derived events: ``seq`` numbers transfers and offload copies
together from 1 in start order; ``ts_ns`` is the start on the trace's own clock;
``thread``/``site``/``buf``/``op_seq`` are 0 and ``implicit`` is False, because a trace names
no Python thread, user line, buffer or op; ``blocking`` is True only where ``memcpy_details``
says ``async:0``; ``api`` is the event name. A d2d copy's ``dst`` is ``gpu:<dest>`` when the
``dest:`` of ``memcpy_details`` is the index of a device plane, else ``gpu:?`` (ROCm writes
``dest:512``). Device labels are plane indices (``/device:GPU:3`` -> ``gpu:3``): on one host
they are JAX's device ids; on a multi-host slice JAX's global ids differ (TPU notes say how).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.events import D2D, D2H, H2D, HOST, TransferEvent

TRACE_SUFFIX = ".xplane.pb"

_HINT = "pass a .xplane.pb file or a jax.profiler log dir"

# Device-side copy activities, by event name.
_DEVICE_COPY = {
    "MemcpyH2D": H2D,
    "MemcpyD2H": D2H,
    "MemcpyD2D": D2D,
    "MemcpyP2P": D2D,
    "CopyHostToDevice": H2D,
    "CopyDeviceToHost": D2H,
    "CopyDeviceToDevice": D2D,
    "CopyPeerToPeer": D2D,
}
_BLIT_PREFIX = "__amd_rocclr_copyBuffer"  # ROCm copy kernels: a copy, direction from the host call
_HOST_API_PREFIXES = ("cuMemcpy", "cudaMemcpy", "hipMemcpy")
_DETAIL_KIND = {
    "HostToDevice": H2D, "HtoD": H2D, "H2D": H2D,
    "DeviceToHost": D2H, "DtoH": D2H, "D2H": D2H,
    "DeviceToDevice": D2D, "DtoD": D2D, "D2D": D2D, "PeerToPeer": D2D, "P2P": D2D,
}
_TPU_TO = "tpu::System::TransferToDevice"
_TPU_FROM = "tpu::System::TransferFromDevice"
_TPU_TUPLE = "tpu::System::AllocateAndFillTupleIndexTable=>Transfer"
# First characters of every name recognized above. Testing ``name[:1]`` (a cached one-char
# string) first is what keeps the pass cheap: substring tests and dict lookups on every event
# would cost as much as reading the names (kernel and HLO names can be 1000+ characters).
_DEVICE_FIRST = "MC_"  # Memcpy*, Copy*, __amd_rocclr_copyBuffer*
_HOST_FIRST = "Mcht"  # Memcpy*/MemCpyAsync, cuMemcpy*/cudaMemcpy*, hipMemcpy*, tpu::System::*

# Lines that aggregate or annotate other lines: never summed, or time would count twice.
_STEPS_LINE = "Steps"
_XLA_OPS_LINE = "XLA Ops"
_STREAM_PREFIX = "Stream #"

_HOST_MEMORY_SPACE = "S(5)"  # XLA's host memory space in layouts
_SHAPE_RE = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\]")
_DTYPE_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1, "f8e4m3b11fnuz": 1, "f8e3m4": 1, "f8e8m0fnu": 1,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
}


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
    host-offload copies (see module doc), apart from ``transfers``. ``notes`` state, in plain
    words, everything that is unknown or was assumed.
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


# --------------------------------------------------------------------------- locating files


def _traces_in(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*" + TRACE_SUFFIX) if p.is_file())


def _runs(path: Path) -> tuple[Path | None, dict[str, list[Path]]]:
    """Run dirs (``<run>/*.xplane.pb``) under the first of ``path/plugins/profile``,
    ``path/profile`` and ``path`` that has any."""
    for base in (path / "plugins" / "profile", path / "profile", path):
        if not base.is_dir():
            continue
        runs = {}
        for sub in base.iterdir():
            if sub.is_dir():
                files = _traces_in(sub)
                if files:
                    runs[sub.name] = files
        if runs:
            return base, runs
    return None, {}


def list_runs(path) -> list[str]:
    """Names of the profiling runs under a log dir, oldest first (JAX names them by time,
    ``YYYY_MM_DD_HH_MM_SS``). Empty for a single file or a dir of bare ``.xplane.pb`` files."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"no such file or directory: {p}; {_HINT}")
    if p.is_file():
        return []
    return sorted(_runs(p)[1])


def find_trace_files(path, run: str | None = None) -> list[Path]:
    """The ``.xplane.pb`` files (one per host) that ``path`` designates.

    ``path`` may be a ``.xplane.pb`` file, a dir holding ``.xplane.pb`` files directly, or a log
    dir (a jaxplace run dir or a ``jax.profiler.trace`` dir) with ``plugins/profile/<run>/``.
    A log dir may hold several runs: the newest (greatest name) is chosen unless ``run`` names
    one, since re-profiling into the same dir is common and the latest capture is what the user
    just made.
    """
    p = Path(path)
    if not p.exists():
        raise TraceError(f"no such file or directory: {p}; {_HINT}")
    if p.is_file():
        if run is not None:
            raise TraceError(f"run {run!r} was given but {p} is a single file; "
                             "pass the log dir that holds plugins/profile/ to choose a run")
        return [p]
    if not p.is_dir():
        raise TraceError(f"{p} is neither a file nor a directory; {_HINT}")
    direct = _traces_in(p)
    if direct and run is None:
        return direct
    base, runs = _runs(p)
    if not runs:
        if run is not None:
            raise TraceError(f"no profiling runs under {p} (expected plugins/profile/<run>/"
                             f"<host>{TRACE_SUFFIX}), so run {run!r} cannot be chosen")
        raise TraceError(f"no {TRACE_SUFFIX} trace found in {p}; expected "
                         f"plugins/profile/<run>/<host>{TRACE_SUFFIX} or {TRACE_SUFFIX} files "
                         "in it (was the script run under jax.profiler.trace?)")
    if run is None:
        return runs[max(runs)]
    if run not in runs:
        raise TraceError(f"no run {run!r} in {base}; available runs: {', '.join(sorted(runs))}")
    return runs[run]


# --------------------------------------------------------------------------- parsing helpers


def _load(path: Path):
    try:
        size = path.stat().st_size
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}; {_HINT}") from None
    if size == 0:
        raise TraceError(f"not a JAX profiler trace: {path} is empty (0 bytes); the capture "
                         f"was probably interrupted; {_HINT}")
    from jax.profiler import ProfileData  # imported late: importing jax is slow

    try:
        data = ProfileData.from_file(str(path))
        planes = list(data.planes)
        names = [pl.name for pl in planes]
    except Exception:  # the native parser raises various types; all mean the same here
        raise TraceError(f"not a JAX profiler trace: {path} could not be parsed as an XSpace "
                         f"protobuf (truncated or corrupt?); {_HINT}") from None
    if not any(n.startswith(("/host:", "/device:")) for n in names):
        raise TraceError(f"not a JAX profiler trace: {path} parsed but has no /host: or /device: "
                         f"plane (random or foreign bytes?); {_HINT}")
    return data, planes


def _details(s) -> dict[str, str]:
    """``'kind:Unknown size:0 dest:512 async:1'`` -> dict of strings."""
    out = {}
    if isinstance(s, str):
        for part in s.split():
            k, sep, v = part.partition(":")
            if sep:
                out[k] = v
    return out


def _int(v, default=None):
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _stats(obj) -> dict:
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


def _varint(raw, i: int) -> tuple[int, int]:
    """The varint at ``raw[i]`` and the index after it. At most 10 bytes, as protobuf allows:
    an unbounded one made decoding quadratic (big-integer shifts; a 1 MiB stat took 32-42 s)."""
    value = 0
    for shift in range(0, 70, 7):
        b = raw[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
    raise ValueError("varint longer than 10 bytes")


def _proto_varints(raw) -> dict[int, int]:
    """Varint fields of a small serialized proto (the TPU ``core_details`` stat); {} when it is
    not one. Linear in the stat's size."""
    if isinstance(raw, str):  # pybind11 hands bytes stats over as UTF-8-decoded str
        raw = raw.encode("utf-8", "surrogateescape")
    if not isinstance(raw, (bytes, bytearray)):
        return {}
    out, i, n = {}, 0, len(raw)
    try:
        while i < n:
            key, i = _varint(raw, i)
            num, wire = key >> 3, key & 7
            if wire == 0:
                out[num], i = _varint(raw, i)
            elif wire == 2:
                ln, i = _varint(raw, i)
                i += ln
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return {}
    except (IndexError, ValueError):
        return {}
    return out


def _hlo_bytes(shape_text: str) -> int:
    """Logical byte size of an HLO array shape such as ``f32[5,1024]{1,0:T(8,128)S(5)}``;
    -1 for anything else (tuples, dynamic dims, sub-byte types)."""
    m = _SHAPE_RE.match(shape_text)
    size = _DTYPE_BYTES.get(m.group(1)) if m else None
    if size is None:
        return -1
    n = size
    for d in m.group(2).split(","):
        if d:
            if not d.isdigit():
                return -1
            n *= int(d)
    return n


def _offload(name: str):
    """(kind, bytes, api) for an HLO ``copy-start`` to/from host memory, else None."""
    lhs, sep, operand = name.partition(" copy-start(")
    if not sep:
        return None
    operand = operand.split(" %", 1)[0]  # 'f32[5,1024]{1,0:T(8,128)S(5)} %param)' -> the shape
    if _HOST_MEMORY_SPACE in operand:
        kind = H2D  # operand lives in host memory: prefetch to the device
    elif _HOST_MEMORY_SPACE in lhs:
        kind = D2H  # result lives in host memory: offload from the device
    else:
        return None
    inst = lhs.split(" =", 1)[0].lstrip("%")
    return kind, _hlo_bytes(operand), f"xla-host-offload:{inst}"


def _host_kind(name: str, det: dict[str, str]):
    kind = _DEVICE_COPY.get(name)
    if kind:
        return kind
    if "HtoD" in name:
        return H2D
    if "DtoH" in name:
        return D2H
    if "DtoD" in name or "Peer" in name:
        return D2D
    return _DETAIL_KIND.get(det.get("kind", ""))


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


# --------------------------------------------------------------------------- reading


class _Copy:
    """A transfer candidate before pairing and numbering."""

    __slots__ = ("ts", "kind", "src", "dst", "bytes", "blocking", "api", "corr", "ctx",
                 "paired", "hlo_op", "assumed_kind")

    def __init__(self, ts, kind, src, dst, nbytes, blocking, api, corr=None, ctx=None):
        self.ts, self.kind, self.src, self.dst = ts, kind, src, dst
        self.bytes, self.blocking, self.api = nbytes, blocking, api
        self.corr, self.ctx = corr, ctx
        self.paired = False
        self.hlo_op = False
        self.assumed_kind = False


def read_trace(path) -> TraceData:
    """Read one ``.xplane.pb`` file. Raises :class:`TraceError` if it is not a readable trace."""
    path = Path(path)
    if path.is_dir():
        raise TraceError(f"{path} is a directory; use read_traces() for a log dir, or {_HINT}")
    _data, planes = _load(path)  # _data keeps the parsed XSpace alive while we read it
    try:
        return _extract(path, planes)
    except TraceError:
        raise
    except Exception as e:  # a trace layout this reader does not expect: say so, on one line
        raise TraceError(f"could not read the events of {path} ({type(e).__name__}: {e}); "
                         "this trace layout is not supported yet, please report it") from None


def read_traces(path, run: str | None = None) -> list[TraceData]:
    """Read every host's trace that ``path`` designates (see :func:`find_trace_files`)."""
    return [read_trace(f) for f in find_trace_files(path, run)]


def _extract(path: Path, planes) -> TraceData:
    name = path.name
    host = name[: -len(TRACE_SUFFIX)] if name.endswith(TRACE_SUFFIX) else path.stem
    notes: list[str] = []
    source: list[str] = []

    # ---- planes
    dev_planes = []  # (platform, index, label, plane)
    host_planes = []
    for pl in planes:
        pname = pl.name
        if pname.startswith("/device:"):
            parts = pname.split(":")
            if len(parts) == 3 and parts[2].isdigit() and parts[1] != "CUSTOM":
                plat = parts[1].lower()
                dev_planes.append((plat, int(parts[2]), f"{plat}:{int(parts[2])}", pl))
        elif pname.startswith("/host:CPU"):
            host_planes.append(pl)
    dev_planes.sort(key=lambda t: (t[0], t[1]))
    devices = [t[2] for t in dev_planes]
    n_by_platform = Counter(t[0] for t in dev_planes)
    main_platform = n_by_platform.most_common(1)[0][0] if n_by_platform else "gpu"

    op_ns: dict[str, int] = {d: 0 for d in devices}
    op_n: dict[str, int] = {d: 0 for d in devices}
    steps = None
    dev_copy_events = []  # (platform, label, name, kind, event)
    offload_events = []  # (label, name, start_ns)
    op_sources = set()

    # ---- device planes: one pass over the chosen op lines; other lines are not iterated
    for plat, _idx, label, pl in dev_planes:
        lines = list(pl.lines)
        op_lines = [ln for ln in lines if ln.name.startswith(_STREAM_PREFIX)]
        if op_lines:
            op_sources.add(f"'{_STREAM_PREFIX}N' lines ({plat})")
        else:
            op_lines = [ln for ln in lines if ln.name == _XLA_OPS_LINE]
            if op_lines:
                op_sources.add(f"'{_XLA_OPS_LINE}' line ({plat})")
        for ln in lines:
            if ln.name == _STEPS_LINE:
                k = sum(1 for _ in ln.events)
                steps = k if steps is None else max(steps, k)
        total, count = 0.0, 0
        for ln in op_lines:
            if ln.name == _XLA_OPS_LINE:
                for e in ln.events:
                    n = e.name
                    if n.startswith(("%copy-", "copy-")) and _HOST_MEMORY_SPACE in n:
                        if " copy-start(" in n:
                            offload_events.append((label, n, e.start_ns))
                            continue
                        if " copy-done(" in n:
                            continue  # the wait for that copy: transfer time, not op time
                    total += e.duration_ns
                    count += 1
            else:
                for e in ln.events:
                    n = e.name
                    if n[:1] in _DEVICE_FIRST:
                        kind = _DEVICE_COPY.get(n)
                        if kind is not None or n.startswith(_BLIT_PREFIX):
                            dev_copy_events.append((plat, label, n, kind, e))
                            continue
                    total += e.duration_ns
                    count += 1
        op_ns[label] = int(total)
        op_n[label] = count

    # ---- host planes: a one-character gate, then substring tests; stats only for candidates
    host_events = []  # (name, event)
    for pl in host_planes:
        for ln in pl.lines:
            for e in ln.events:
                n = e.name
                if n[:1] in _HOST_FIRST and ("emcpy" in n or "Transfer" in n or "MemCpy" in n):
                    host_events.append((n, e))

    # ---- device-side copies
    copies: list[_Copy] = []
    by_corr: dict[int, list[_Copy]] = {}
    dev_names: Counter = Counter()
    for plat, label, n, kind, e in dev_copy_events:
        st = _stats(e)
        det = _details(st.get("memcpy_details"))
        size = _int(det.get("size"), 0)
        if kind == H2D:
            src, dst = HOST, label
        elif kind == D2H:
            src, dst = label, HOST
        else:  # d2d, or a blit kernel whose direction the host call will tell
            src = label
            dest = _int(det.get("dest"))
            dst = (f"{plat}:{dest}" if dest is not None and 0 <= dest < n_by_platform[plat]
                   else f"{plat}:?")
        c = _Copy(int(e.start_ns), kind, src, dst, size if size > 0 else -1,
                  det.get("async") == "0", n, _int(st.get("correlation_id")), st.get("context_id"))
        c.hlo_op = "hlo_op" in st
        copies.append(c)
        dev_names[n] += 1
        if c.corr is not None:
            by_corr.setdefault(c.corr, []).append(c)

    # ---- host-side events
    host_only: Counter = Counter()
    paired: Counter = Counter()
    unknown_dir: Counter = Counter()
    tpu_names: Counter = Counter()
    tpu_variants = 0
    tpu_raw = []  # (ts, kind, bytes, ordinal, name)
    tuple_tables = 0
    tf_memcpy_async = 0
    for n, e in host_events:
        if n == _TPU_TO or n == _TPU_FROM:
            st = _stats(e)
            size = _int(st.get("size"), 0)
            tpu_raw.append((int(e.start_ns), H2D if n == _TPU_TO else D2H,
                            size if size > 0 else -1, _int(st.get("device_ordinal")), n))
            tpu_names[n] += 1
        elif n.startswith((_TPU_TO, _TPU_FROM)):
            tpu_variants += 1
        elif n == _TPU_TUPLE:
            tuple_tables += 1
        elif n == "MemCpyAsync":
            tf_memcpy_async += 1
        elif n.startswith(_HOST_API_PREFIXES) or n in _DEVICE_COPY:
            _host_copy(n, _stats(e), int(e.start_ns), by_corr, copies, main_platform,
                       n_by_platform, paired, host_only, unknown_dir)
        # anything else (TPU 'PCIe/Memcpy Dispatch', 'H2D Dispatch', ...) wraps events above

    for c in copies:  # blit kernels whose host call was not found
        if c.kind is None:
            c.kind, c.assumed_kind = D2D, True

    # ---- TPU host transfers: map device_ordinal to a plane
    if tpu_raw:
        ordinals = {t[3] for t in tpu_raw if t[3] is not None}
        mapping, how = _tpu_mapping(ordinals, [t for t in dev_planes if t[0] == "tpu"])
        if ordinals:
            shown = ", ".join(str(o) for o in sorted(ordinals))
            if how:
                notes.append(f"TPU host transfers name device_ordinal {shown}: mapped to "
                             f"{', '.join(mapping[o] for o in sorted(ordinals))} {how}")
            else:
                notes.append(f"TPU host transfers name device_ordinal {shown}: no TPU plane "
                             "matches, so their device is shown as tpu:?")
        for ts, kind, nbytes, o, n in tpu_raw:
            dev = mapping.get(o, "tpu:?")
            src, dst = (HOST, dev) if kind == H2D else (dev, HOST)
            copies.append(_Copy(ts, kind, src, dst, nbytes, False, n))
        source.append("TPU host transfers: "
                      + ", ".join(f"{k} x{v}" for k, v in sorted(tpu_names.items())))
    if tpu_variants:
        notes.append(f"{_plural(tpu_variants, 'TPU =>IssueEvent/=>Done event')}: the same "
                     "transfers again; skipped")

    # ---- HLO host-offload copies (plain tuples: there can be thousands)
    offload = []  # (ts, kind, src, dst, bytes, api)
    if offload_events:
        cache = {}
        for label, n, ts in offload_events:
            key = (label, n)
            info = cache.get(key, False)
            if info is False:
                info = _offload(n)
                if info is not None:
                    kind, nbytes, api = info
                    src, dst = (HOST, label) if kind == H2D else (label, HOST)
                    info = (kind, src, dst, nbytes, api)
                cache[key] = info
            if info is not None:
                offload.append((int(ts),) + info)
        if offload:
            kc = Counter(o[1] for o in offload)
            unknown = sum(1 for o in offload if o[4] < 0)
            notes.append(
                f"{_plural(len(offload), 'XLA host-offload copy', 'XLA host-offload copies')} "
                f"(copy-start to/from memory space S(5)): {kc[H2D]} h2d, {kc[D2H]} d2h; bytes "
                "are the logical size of the HLO shape (tile padding not included)"
                + (f", {unknown} too complex to size (bytes=-1)" if unknown else "")
                + "; listed in offload_transfers, not in transfers")
            source.append(f"HLO host-offload copies: copy-start with S(5) x{len(offload)}")

    # ---- CPU-only trace: devices and op time from executed HLO ops on host threads
    if not dev_planes:
        devices, op_ns, op_n = _cpu_ops(host_planes)
        if devices:
            op_sources.add("host events with hlo_op and device_ordinal (cpu)")
            notes.append("no device plane (a CPU trace): devices and op time come from HLO ops "
                         "run on host threads; the CPU runtime records no transfer events "
                         "(host and CPU devices share memory)")
        else:
            notes.append("no device plane and no executed HLO op: the trace shows no device")

    # ---- source and notes: what was recognized, and everything unknown or assumed
    if dev_names:
        part = "device copies: " + ", ".join(f"{k} x{v}" for k, v in sorted(dev_names.items()))
        if paired:
            part += (" (their host calls, paired by correlation_id and not counted again: "
                     + ", ".join(f"{k} x{v}" for k, v in sorted(paired.items())) + ")")
        source.append(part)
    if host_only:
        source.append("host copy calls without a device event: "
                      + ", ".join(f"{k} x{v}" for k, v in sorted(host_only.items())))
        notes.append(f"{_plural(sum(host_only.values()), 'copy', 'copies')} seen only as a host "
                     "call (no device-side event in the trace): counted from the host event")
    for kind in (H2D, D2H, D2D):
        unknown = sum(1 for c in copies if c.kind == kind and c.bytes < 0)
        if unknown:
            notes.append(f"{_plural(unknown, kind + ' copy', kind + ' copies')}: no size in this "
                         "trace (bytes=-1, size unknown)")
    assumed = sum(1 for c in copies if c.assumed_kind)
    if assumed:
        notes.append(f"{_plural(assumed, _BLIT_PREFIX + ' kernel')}: no matching host memcpy "
                     "call, so the direction is unknown; counted as d2d")
    dest_unknown = sum(1 for c in copies if c.kind == D2D and c.dst.endswith(":?"))
    if dest_unknown:
        notes.append(f"{_plural(dest_unknown, 'd2d copy', 'd2d copies')}: the other device is "
                     "not named (dst shown as ?)")
    hlo_copies = sum(1 for c in copies if c.kind == D2D and c.hlo_op)
    if hlo_copies:
        notes.append(f"{_plural(hlo_copies, 'd2d copy', 'd2d copies')}: part of an HLO op in a "
                     "compiled program (hlo_op stat), possibly a copy within one device")
    if unknown_dir:
        notes.append(f"{_plural(sum(unknown_dir.values()), 'host memcpy call')} of unknown "
                     "direction: not counted (" + ", ".join(sorted(unknown_dir)) + ")")
    if tuple_tables:
        notes.append(f"{_plural(tuple_tables, 'TPU tuple-index-table transfer')} ({_TPU_TUPLE}): "
                     "not counted (no size; runtime metadata, not array data)")
    if tf_memcpy_async:
        notes.append(f"{_plural(tf_memcpy_async, 'MemCpyAsync host event')} (TF collective "
                     "executor): not counted (no device, direction or size recorded)")
    if not copies and not offload:
        source.append("no transfer events recognized")
    if op_sources:
        source.append("ops: " + ", ".join(sorted(op_sources)))

    # ---- number everything on one timeline (seq from 1), then split
    order = [(c.ts, 0, i) for i, c in enumerate(copies)]
    order += [(o[0], 1, j) for j, o in enumerate(offload)]
    order.sort()
    transfers, offload_transfers = [], []
    make = TransferEvent._make
    for seq, (ts, is_offload, i) in enumerate(order, 1):
        if is_offload:
            _, kind, src, dst, nbytes, api = offload[i]
            offload_transfers.append(
                make((seq, ts, 0, kind, src, dst, nbytes, False, False, api, 0, 0, 0)))
        else:
            c = copies[i]
            transfers.append(make((seq, ts, 0, c.kind, c.src, c.dst, c.bytes, False,
                                   c.blocking, c.api, 0, 0, 0)))

    return TraceData(host=host, path=path, devices=devices, transfers=transfers,
                     device_op_ns=op_ns, device_op_count=op_n, step_count=steps,
                     source="; ".join(source), notes=notes,
                     offload_transfers=offload_transfers)


def _host_copy(n, st, ts, by_corr, copies, platform, n_by_platform, paired, host_only,
               unknown_dir):
    """A host memcpy call: the twin of a device-side copy (pair and enrich it) or, without
    one, a transfer of its own."""
    det = _details(st.get("memcpy_details"))
    corr = _int(st.get("correlation_id"))
    ctx = st.get("context_id")
    kind = _host_kind(n, det)
    size = _int(det.get("size"), 0)
    for c in by_corr.get(corr, ()) if corr is not None else ():
        if not c.paired and (c.ctx is None or ctx is None or c.ctx == ctx):
            c.paired = True
            paired[n] += 1
            if c.kind is None and kind is not None:  # a blit kernel: the call tells the direction
                c.kind = kind
                if kind == H2D:
                    c.src, c.dst = HOST, c.src
                elif kind == D2H:
                    c.dst = HOST
            if c.bytes < 0 and size > 0:
                c.bytes = size
            if c.api.startswith(_BLIT_PREFIX) and "async" in det:
                c.blocking = det["async"] == "0"
            c.hlo_op = c.hlo_op or "hlo_op" in st
            return
    if kind is None:
        unknown_dir[n] += 1
        return
    dest = _int(det.get("dest"))
    dev = (f"{platform}:{dest}" if dest is not None and 0 <= dest < n_by_platform[platform]
           else f"{platform}:?")
    if kind == H2D:
        src, dst = HOST, dev
    elif kind == D2H:
        src, dst = dev, HOST
    else:
        src, dst = f"{platform}:?", dev
    c = _Copy(ts, kind, src, dst, size if size > 0 else -1, det.get("async") == "0", n, corr, ctx)
    c.hlo_op = "hlo_op" in st
    copies.append(c)
    host_only[n] += 1


def _cpu_ops(host_planes):
    """(devices, op_ns, op_count) of a CPU-only trace, from host events that carry both
    ``hlo_op`` and ``device_ordinal`` (the CPU runtime's per-op events)."""
    ns: Counter = Counter()
    cnt: Counter = Counter()
    for pl in host_planes:
        for ln in pl.lines:
            if ln.name.startswith("python"):
                continue  # the Python tracer's frames: no HLO ops there
            for e in ln.events:
                if e.name.startswith(("$", "ThreadpoolListener")):
                    continue
                st = _stats(e)
                if "hlo_op" in st and "device_ordinal" in st:
                    o = _int(st["device_ordinal"])
                    if o is not None:
                        ns[o] += e.duration_ns
                        cnt[o] += 1
    devs = sorted(cnt)
    return ([f"cpu:{o}" for o in devs], {f"cpu:{o}": int(ns[o]) for o in devs},
            {f"cpu:{o}": cnt[o] for o in devs})


def _tpu_mapping(ordinals: set[int], tpu_planes) -> tuple[dict[int, str], str]:
    """Map the ``device_ordinal`` of TPU host events to plane labels, and say how.

    Host events name the runtime's (global) device id, which differs from the plane index on
    a multi-host slice. Each TPU plane's ``core_details`` stat is a small proto whose fields
    2/5/6 are the local device ordinal, global chip id and global core id; the first of those
    that covers every ordinal seen is used. Without it, an ordinal equal to a plane index is
    taken as that plane (stated as an assumption)."""
    if not ordinals:
        return {}, ""
    details = {}
    for _plat, _idx, label, pl in tpu_planes:
        for k, v in _stats(pl).items():
            if k == "core_details":
                details[label] = _proto_varints(v)
    if details and len(details) == len(tpu_planes):
        for fnum, fname in ((6, "global_core_id"), (5, "global_chip_id"), (2, "device_ordinal")):
            m = {}
            for label, f in details.items():
                m.setdefault(f.get(fnum, 0), []).append(label)
            if all(len(m.get(o, ())) == 1 for o in ordinals):
                return ({o: m[o][0] for o in ordinals},
                        f"by the {fname} in each plane's core_details")
    by_index = {idx: label for _plat, idx, label, _pl in tpu_planes}
    if ordinals <= set(by_index):
        return ({o: by_index[o] for o in ordinals},
                "assuming device_ordinal equals the plane index (no core_details to check)")
    return {}, ""

