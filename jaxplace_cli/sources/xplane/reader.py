"""Load one ``.xplane.pb`` with ``ProfileData`` and assemble its :class:`TraceData`.

The steps, each in its own module: size check (:mod:`.files`), parse, one pass over the planes
(:mod:`.planes`), device copies and host calls paired (:mod:`.pairing`), TPU host transfers
(:mod:`.tpu`), host-offload copies (:mod:`.offload`), CPU-only traces (:mod:`.cpu`); then notes
and sources in a fixed order, and one timeline numbering transfers and offload copies.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from jaxplace_cli.model.events import TransferEvent
from jaxplace_cli.sources.xplane import cpu, cuda, offload
from jaxplace_cli.sources.xplane.common import HINT, TRACE_SUFFIX, Copy, TraceData, TraceError, stats
from jaxplace_cli.sources.xplane.files import check_size, find_trace_files
from jaxplace_cli.sources.xplane.pairing import CopyPairing, is_host_copy_call
from jaxplace_cli.sources.xplane.planes import host_candidates, scan_devices, split_planes
from jaxplace_cli.sources.xplane.tpu import TpuHostTransfers


def load(path: Path):
    """(the parsed XSpace, its planes); the size limit is checked before anything is read."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}; {HINT}") from None
    if size == 0:
        raise TraceError(f"not a JAX profiler trace: {path} is empty (0 bytes); the capture "
                         f"was probably interrupted; {HINT}")
    check_size(path, size)
    from jax.profiler import ProfileData  # imported late: importing jax is slow

    try:
        data = ProfileData.from_file(str(path))
        planes = list(data.planes)
        names = [pl.name for pl in planes]
    except Exception:  # the native parser raises various types; all mean the same here
        raise TraceError(f"not a JAX profiler trace: {path} could not be parsed as an XSpace "
                         f"protobuf (truncated or corrupt?); {HINT}") from None
    if not any(n.startswith(("/host:", "/device:")) for n in names):
        raise TraceError(f"not a JAX profiler trace: {path} parsed but has no /host: or /device: "
                         f"plane (random or foreign bytes?); {HINT}")
    return data, planes


def read_trace(path) -> TraceData:
    """Read one ``.xplane.pb`` file. Raises :class:`TraceError` if it is not a readable trace."""
    path = Path(path)
    if path.is_dir():
        raise TraceError(f"{path} is a directory; use read_traces() for a log dir, or {HINT}")
    _data, planes = load(path)  # _data keeps the parsed XSpace alive while we read it
    try:
        return extract(path, planes)
    except TraceError:
        raise
    except Exception as e:  # a trace layout this reader does not expect: say so, on one line
        raise TraceError(f"could not read the events of {path} ({type(e).__name__}: {e}); "
                         "this trace layout is not supported yet, please report it") from None


def read_traces(path, run: str | None = None) -> list[TraceData]:
    """Read every host's trace that ``path`` designates (see :func:`find_trace_files`)."""
    return [read_trace(f) for f in find_trace_files(path, run)]


def extract(path: Path, planes) -> TraceData:
    """The :class:`TraceData` of parsed planes. Notes and sources come in a fixed order (TPU,
    offload, CPU, copies, skipped events), so the same trace always reads the same."""
    name = path.name
    host = name[: -len(TRACE_SUFFIX)] if name.endswith(TRACE_SUFFIX) else path.stem
    dev_planes, host_planes = split_planes(planes)
    devices = [d.label for d in dev_planes]
    n_by_platform = Counter(d.platform for d in dev_planes)
    scan = scan_devices(dev_planes)

    pairing = CopyPairing(n_by_platform, n_by_platform.most_common(1)[0][0] if n_by_platform else "gpu")
    for ev in scan.copy_events:
        pairing.add_device_copy(*ev)
    tpu = TpuHostTransfers()
    tf_memcpy_async = _host_events(host_candidates(host_planes), pairing, tpu)
    pairing.close()

    notes: list[str] = []
    source: list[str] = []
    for c in tpu.copies([d for d in dev_planes if d.platform == "tpu"], notes, source):
        pairing.add(c)
    offload_copies = offload.offload_copies(scan.offload_events)
    offload.describe(offload_copies, notes, source)
    op_ns, op_n = scan.op_ns, scan.op_count
    if not dev_planes:
        devices, op_ns, op_n = cpu.cpu_ops(host_planes)
        if devices:
            scan.op_sources.add(cpu.SOURCE)
        notes.append(cpu.NOTE if devices else cpu.NO_DEVICE_NOTE)
    source += pairing.sources()
    notes += pairing.notes() + tpu.tuple_table_note() + cuda.tf_memcpy_async_note(tf_memcpy_async)
    if not pairing.copies and not offload_copies:
        source.append("no transfer events recognized")
    if scan.op_sources:
        source.append("ops: " + ", ".join(sorted(scan.op_sources)))

    transfers, offload_transfers = _timeline(pairing.copies, offload_copies)
    return TraceData(host=host, path=path, devices=devices, transfers=transfers,
                     device_op_ns=op_ns, device_op_count=op_n, step_count=scan.steps,
                     source="; ".join(source), notes=notes,
                     offload_transfers=offload_transfers)


def _host_events(candidates, pairing: CopyPairing, tpu: TpuHostTransfers) -> int:
    """Hand each host candidate to whom it belongs; the number of TF ``MemCpyAsync`` events.
    Anything else (TPU 'PCIe/Memcpy Dispatch', 'H2D Dispatch', ...) wraps events handled here."""
    tf_memcpy_async = 0
    for n, e in candidates:
        if tpu.take(n, e):
            continue
        if n == cuda.TF_MEMCPY_ASYNC:
            tf_memcpy_async += 1
        elif is_host_copy_call(n):
            pairing.add_host_call(n, stats(e), int(e.start_ns))
    return tf_memcpy_async


def _timeline(copies: list[Copy], offload_copies: list[tuple]):
    """Number transfers and offload copies together on one timeline (seq from 1, start order;
    ties in the order found), then split them."""
    order = [(c.ts, 0, i) for i, c in enumerate(copies)]
    order += [(o[0], 1, j) for j, o in enumerate(offload_copies)]
    order.sort()
    transfers, offload_transfers = [], []
    make = TransferEvent._make
    for seq, (ts, is_offload, i) in enumerate(order, 1):
        if is_offload:
            _, kind, src, dst, nbytes, api = offload_copies[i]
            offload_transfers.append(
                make((seq, ts, 0, kind, src, dst, nbytes, False, False, api, 0, 0, 0)))
        else:
            c = copies[i]
            transfers.append(make((seq, ts, 0, c.kind, c.src, c.dst, c.bytes, False,
                                   c.blocking, c.api, 0, 0, 0)))
    return transfers, offload_transfers
