"""TPU: host transfers named by the runtime, and which plane their device ordinal means.

A TPU trace has no device-side copy events. The host plane's ``tpu::System::TransferToDevice``
/ ``TransferFromDevice`` events are the transfers (stats ``size``, ``device_ordinal``); their
``=>IssueEvent`` and ``=>IssueEvent=>Done`` variants describe the same transfer again and are
skipped; ``AllocateAndFillTupleIndexTable=>Transfer`` moves runtime metadata, not array data.

``device_ordinal`` is the runtime's (global) device id, which differs from the plane index on
a multi-host slice: each TPU plane's ``core_details`` stat, a small serialized proto, says
which ids the plane has. That stat comes from the trace, so it is decoded in linear time
whatever it holds (a varint is at most 10 bytes, as protobuf allows).
"""
from __future__ import annotations

from collections import Counter

from jaxplace_cli.model.events import D2H, H2D, HOST
from jaxplace_cli.model.sizes import plural
from jaxplace_cli.sources.xplane.common import Copy, stats, to_int

TO_DEVICE = "tpu::System::TransferToDevice"
FROM_DEVICE = "tpu::System::TransferFromDevice"
TUPLE_TABLE = "tpu::System::AllocateAndFillTupleIndexTable=>Transfer"
# Real core_details protos are 4-8 bytes (tests/data/foreign_traces, TPU v6e) and at most a few
# hundred with a host name. A bigger one is not decoded: even linear, a 4 MiB stat of 2M
# one-byte fields took 3.2 s in Python, most of the 5 s an audit of such a trace may take.
MAX_CORE_DETAILS = 4096


def varint(raw, i: int) -> tuple[int, int]:
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


def proto_varints(raw) -> dict[int, int]:
    """Varint fields of a small serialized proto (the TPU ``core_details`` stat); {} when it is
    not one or is over :data:`MAX_CORE_DETAILS` bytes. Linear in the stat's size."""
    if isinstance(raw, str):  # pybind11 hands bytes stats over as UTF-8-decoded str
        if len(raw) > MAX_CORE_DETAILS:  # each character is 1-4 bytes: too big either way
            return {}
        raw = raw.encode("utf-8", "surrogateescape")
    if not isinstance(raw, (bytes, bytearray)) or len(raw) > MAX_CORE_DETAILS:
        return {}
    out, i, n = {}, 0, len(raw)
    try:
        while i < n:
            key, i = varint(raw, i)
            num, wire = key >> 3, key & 7
            if wire == 0:
                out[num], i = varint(raw, i)
            elif wire == 2:
                ln, i = varint(raw, i)
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


def device_mapping(ordinals: set[int], tpu_planes) -> tuple[dict[int, str], str]:
    """Map the ``device_ordinal`` of TPU host events to plane labels, and say how.

    Each TPU plane's ``core_details`` proto has fields 2/5/6: the local device ordinal, global
    chip id and global core id; the first of those that covers every ordinal seen is used.
    Without it, an ordinal equal to a plane index is taken as that plane (stated as an
    assumption). ``tpu_planes``: (platform, index, label, plane) of the TPU planes."""
    if not ordinals:
        return {}, ""
    core_details = {}
    for _plat, _idx, label, pl in tpu_planes:
        for k, v in stats(pl).items():
            if k == "core_details":
                core_details[label] = proto_varints(v)
    if core_details and len(core_details) == len(tpu_planes):
        for fnum, fname in ((6, "global_core_id"), (5, "global_chip_id"), (2, "device_ordinal")):
            m = {}
            for label, f in core_details.items():
                m.setdefault(f.get(fnum, 0), []).append(label)
            if all(len(m.get(o, ())) == 1 for o in ordinals):
                return ({o: m[o][0] for o in ordinals},
                        f"by the {fname} in each plane's core_details")
    by_index = {idx: label for _plat, idx, label, _pl in tpu_planes}
    if ordinals <= set(by_index):
        return ({o: by_index[o] for o in ordinals},
                "assuming device_ordinal equals the plane index (no core_details to check)")
    return {}, ""


class TpuHostTransfers:
    """The TPU runtime's host events of one trace: transfers, and what was skipped."""

    def __init__(self):
        self._raw: list[tuple] = []  # (ts, kind, bytes, ordinal, name)
        self._names: Counter = Counter()
        self._variants = 0
        self._tuple_tables = 0

    def take(self, name: str, event) -> bool:
        """Record a TPU runtime host event; False when ``name`` is not one."""
        if name == TO_DEVICE or name == FROM_DEVICE:
            st = stats(event)
            size = to_int(st.get("size"), 0)
            self._raw.append((int(event.start_ns), H2D if name == TO_DEVICE else D2H,
                              size if size > 0 else -1, to_int(st.get("device_ordinal")), name))
            self._names[name] += 1
        elif name.startswith((TO_DEVICE, FROM_DEVICE)):
            self._variants += 1
        elif name == TUPLE_TABLE:
            self._tuple_tables += 1
        else:
            return False
        return True

    def copies(self, tpu_planes, notes: list[str], source: list[str]) -> list[Copy]:
        """The transfers, each on the plane its ``device_ordinal`` maps to (``tpu:?`` when none
        does); what the mapping assumed goes to ``notes``, what was recognized to ``source``."""
        out = []
        if self._raw:
            ordinals = {t[3] for t in self._raw if t[3] is not None}
            mapping, how = device_mapping(ordinals, tpu_planes)
            if ordinals:
                shown = ", ".join(str(o) for o in sorted(ordinals))
                if how:
                    notes.append(f"TPU host transfers name device_ordinal {shown}: mapped to "
                                 f"{', '.join(mapping[o] for o in sorted(ordinals))} {how}")
                else:
                    notes.append(f"TPU host transfers name device_ordinal {shown}: no TPU plane "
                                 "matches, so their device is shown as tpu:?")
            for ts, kind, nbytes, o, n in self._raw:
                dev = mapping.get(o, "tpu:?")
                src, dst = (HOST, dev) if kind == H2D else (dev, HOST)
                out.append(Copy(ts, kind, src, dst, nbytes, False, n))
            source.append("TPU host transfers: "
                          + ", ".join(f"{k} x{v}" for k, v in sorted(self._names.items())))
        if self._variants:
            notes.append(f"{plural(self._variants, 'TPU =>IssueEvent/=>Done event')}: the same "
                         "transfers again; skipped")
        return out

    def tuple_table_note(self) -> list[str]:
        if not self._tuple_tables:
            return []
        return [f"{plural(self._tuple_tables, 'TPU tuple-index-table transfer')} ({TUPLE_TABLE}): "
                "not counted (no size; runtime metadata, not array data)"]
