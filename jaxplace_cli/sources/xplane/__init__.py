"""Read any ``jax.profiler`` trace (``*.xplane.pb``) into jaxplace's event model.

A trace is an XSpace protobuf: planes (``/host:CPU``, ``/device:GPU:0``, ``/device:TPU:0``,
...) hold lines (threads, GPU streams, derived lines such as ``XLA Ops``), lines hold events
with a name, a start, a duration and typed stats. ``jax.profiler.ProfileData`` parses it
natively; this package makes one pass over the events, looks at the stats of the few events
that can be transfers, and returns one :class:`TraceData` per host file.

Where each part lives
---------------------
``files`` finds the files a path designates and bounds what is read (size limits checked with
``stat`` before any parse, a depth limit for directory walks); ``reader`` loads a file with
``ProfileData`` and assembles the result; ``common`` is the shared model (``TraceData``,
``TraceError``, a transfer candidate ``Copy``, stat helpers); ``planes`` makes the one pass
over device and host planes; ``pairing`` owns correlation-id pairing of host calls with device
copies and its counts; ``cuda``, ``rocm``, ``tpu``, ``offload`` and ``cpu`` hold what is
particular to each.

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

from jaxplace_cli.sources.xplane.common import TRACE_SUFFIX, TraceData, TraceError
from jaxplace_cli.sources.xplane.files import (
    MAX_TRACE_BYTES,
    MAX_TRACE_DIR_BYTES,
    MAX_WALK_DEPTH,
    find_trace_files,
    holds_trace,
    list_runs,
)
from jaxplace_cli.sources.xplane.offload import host_offload_copy as _offload  # noqa: F401 (old name, tests use it)
from jaxplace_cli.sources.xplane.reader import read_trace, read_traces

__all__ = ["MAX_TRACE_BYTES", "MAX_TRACE_DIR_BYTES", "MAX_WALK_DEPTH", "TRACE_SUFFIX",
           "TraceData", "TraceError", "find_trace_files", "holds_trace", "list_runs",
           "read_trace", "read_traces"]
