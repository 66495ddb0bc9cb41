"""Collectives (all-reduce, all-gather, send/recv, ...) that a ``jax.profiler`` trace shows.

JAX's hooks see a jit call, not the collectives XLA compiled into it (GSPMD inserts them while
partitioning), so the executed HLO ops in a trace are where they show:

* CPU: host events carrying ``hlo_op``, ``hlo_module``, ``device_ordinal`` and ``run_id``
  (the CPU runtime's per-thunk events: ``all-reduce`` with ``run_id`` per execution);
* GPU/TPU: the ``XLA Ops`` line of each ``/device:`` plane (event name = HLO op name,
  ``long_name`` = the HLO instruction text, which states the result shape).

An op counts when its name, less a ``.N`` suffix, is a collective; ``*-done`` halves of async
pairs are skipped (the ``*-start`` is the collective). Bytes are the logical size of the
result shape when ``long_name`` gives one, else unknown (-1): the CPU runtime's events give no
shape (measured on JAX 0.10.2), so on CPU only counts and times are known. Executions are the
distinct ``run_id`` values of the module (CPU) or, without run ids, unknown (0).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli.sources.xplane.common import stats as _stats
from jaxplace_cli.sources.xplane.offload import hlo_bytes as _hlo_bytes
from jaxplace_cli.sources.xplane.reader import load as _load

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
         "collective-permute", "collective-broadcast", "send", "recv")
_NAME = re.compile("^(" + "|".join(re.escape(k) for k in KINDS) + r")(-start)?(\.\d+)*$")
_RESULT = re.compile(r"=\s*(\S+)\s+[a-z-]+(?:-start)?\(")
MAX_EVENTS = 20_000_000  # one pass over at most this many events (untrusted input)


@dataclass
class CollectiveStat:
    """One collective kind in one compiled module, as executed in one trace file."""

    module: str  # HLO module (``jit_step``); "" when the trace does not say
    kind: str  # all-reduce, all-gather, ...
    count: int = 0  # executed ops (every device counts its own)
    time_ns: int = 0
    bytes: int = 0  # sum of the known sizes
    unknown_size: int = 0  # ops whose size the trace does not state
    devices: set = field(default_factory=set)  # device ordinals (local to the trace's host)
    runs: set = field(default_factory=set)  # run_id values: executions of the module

    @property
    def executions(self) -> int:
        return len(self.runs)


def collective_kind(name: str) -> str | None:
    m = _NAME.match(name or "")
    return m.group(1) if m else None


def read_collectives(path) -> list[CollectiveStat]:
    """Collectives in one ``.xplane.pb`` file, by (module, kind); TraceError if unreadable."""
    _, planes = _load(Path(path))
    found: dict[tuple[str, str], CollectiveStat] = {}
    seen = 0
    for pl in planes:
        device = pl.name.startswith("/device:")
        for ln in pl.lines:
            if device and ln.name != "XLA Ops":
                continue
            if not device and ln.name.startswith("python"):
                continue
            for e in ln.events:
                seen += 1
                if seen > MAX_EVENTS:
                    return list(found.values())
                kind = collective_kind(e.name)
                if kind is None:
                    continue
                st = _stats(e)
                if not device and "hlo_op" not in st:
                    continue  # a host event named like an op, not an executed one
                _add(found, kind, st, e.duration_ns, pl.name if device else None)
    return sorted(found.values(), key=lambda c: (c.module, c.kind))


def _add(found: dict, kind: str, st: dict, dur_ns, plane: str | None) -> None:
    module = str(st.get("hlo_module", ""))
    c = found.get((module, kind))
    if c is None:
        c = found[(module, kind)] = CollectiveStat(module, kind)
    c.count += 1
    c.time_ns += int(dur_ns or 0)
    c.devices.add(plane if plane is not None else str(st.get("device_ordinal", "?")))
    if "run_id" in st:
        c.runs.add(str(st["run_id"]))
    m = _RESULT.search(str(st.get("long_name", "")))
    size = _hlo_bytes(m.group(1)) if m else -1
    if size >= 0:
        c.bytes += size
    else:
        c.unknown_size += 1
