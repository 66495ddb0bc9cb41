"""Correlation-id pairing: one transfer recorded twice (host call + device copy) counted once.

:class:`CopyPairing` is the one owner of the transfer candidates of a trace and of the counts
that say how each was recognized. Device-side copies (CUDA ``Memcpy*``, ROCm ``Copy*`` and
blit kernels) are added first and wait under their ``correlation_id``. A host memcpy call
(``cuMemcpy*``, ``cudaMemcpy*``, ``hipMemcpy*``, or a host event named like a device copy)
then either pairs with a waiting copy of the same correlation id (and context id, when both
carry one): the same transfer, not counted again, but it fills in what the device copy lacks
(a blit kernel's direction, a size, the async flag); or, with no partner, becomes a transfer
of its own ("host-only"); or, with no direction either, is only counted as unknown. TPU host
transfers, which need no pairing, are added as they are so that every note covers them too.
"""
from __future__ import annotations

from collections import Counter

from jaxplace_cli.model.events import D2D, D2H, H2D, HOST
from jaxplace_cli.model.sizes import plural
from jaxplace_cli.sources.xplane import cuda, rocm
from jaxplace_cli.sources.xplane.common import Copy, details, stats, to_int

DEVICE_COPY = {**cuda.DEVICE_COPY, **rocm.DEVICE_COPY}
HOST_API_PREFIXES = cuda.HOST_API_PREFIXES + rocm.HOST_API_PREFIXES
_DETAIL_KIND = {
    "HostToDevice": H2D, "HtoD": H2D, "H2D": H2D,
    "DeviceToHost": D2H, "DtoH": D2H, "D2H": D2H,
    "DeviceToDevice": D2D, "DtoD": D2D, "D2D": D2D, "PeerToPeer": D2D, "P2P": D2D,
}


def is_host_copy_call(name: str) -> bool:
    return name.startswith(HOST_API_PREFIXES) or name in DEVICE_COPY


def host_kind(name: str, det: dict[str, str]) -> str | None:
    """The direction of a host memcpy call: from its name, else from ``memcpy_details``."""
    kind = DEVICE_COPY.get(name)
    if kind:
        return kind
    if "HtoD" in name:
        return H2D
    if "DtoH" in name:
        return D2H
    if "DtoD" in name or "Peer" in name:
        return D2D
    return _DETAIL_KIND.get(det.get("kind", ""))


def _listed(counts: Counter) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))


class CopyPairing:
    """The transfer candidates of one trace file and how each was recognized.

    ``copies``: every candidate, in the order added (device copies, host-only calls, then
    transfers that needed no pairing); ``device_names``: device copies by event name;
    ``paired``: host calls that matched a device copy; ``host_only``: host calls counted on
    their own; ``unknown_direction``: host calls without partner or direction, not counted.
    ``n_by_platform`` (device planes per platform) decides whether a ``dest:`` index names a
    device; ``platform`` is the one a host-only call's device belongs to.
    """

    def __init__(self, n_by_platform: Counter, platform: str):
        self.copies: list[Copy] = []
        self.device_names: Counter = Counter()
        self.paired: Counter = Counter()
        self.host_only: Counter = Counter()
        self.unknown_direction: Counter = Counter()
        self._by_corr: dict[int, list[Copy]] = {}
        self._n_by_platform = n_by_platform
        self._platform = platform

    def _device(self, platform: str, dest: int | None) -> str:
        if dest is not None and 0 <= dest < self._n_by_platform[platform]:
            return f"{platform}:{dest}"
        return f"{platform}:?"

    def add_device_copy(self, platform: str, label: str, name: str, kind: str | None, event) -> None:
        """A device-side copy event (``kind`` None for a blit kernel) on device ``label``."""
        st = stats(event)
        det = details(st.get("memcpy_details"))
        size = to_int(det.get("size"), 0)
        if kind == H2D:
            src, dst = HOST, label
        elif kind == D2H:
            src, dst = label, HOST
        else:  # d2d, or a blit kernel whose direction the host call will tell
            src, dst = label, self._device(platform, to_int(det.get("dest")))
        c = Copy(int(event.start_ns), kind, src, dst, size if size > 0 else -1,
                 det.get("async") == "0", name, to_int(st.get("correlation_id")), st.get("context_id"))
        c.hlo_op = "hlo_op" in st
        self.copies.append(c)
        self.device_names[name] += 1
        if c.corr is not None:
            self._by_corr.setdefault(c.corr, []).append(c)

    def add_host_call(self, name: str, st: dict, ts: int) -> None:
        """A host memcpy call: the twin of a device-side copy (pair and enrich it) or, without
        one, a transfer of its own."""
        det = details(st.get("memcpy_details"))
        corr = to_int(st.get("correlation_id"))
        ctx = st.get("context_id")
        kind = host_kind(name, det)
        size = to_int(det.get("size"), 0)
        for c in self._by_corr.get(corr, ()) if corr is not None else ():
            if not c.paired and (c.ctx is None or ctx is None or c.ctx == ctx):
                c.paired = True
                self.paired[name] += 1
                rocm.enrich_blit(c, kind, det)
                if c.bytes < 0 and size > 0:
                    c.bytes = size
                c.hlo_op = c.hlo_op or "hlo_op" in st
                return
        if kind is None:
            self.unknown_direction[name] += 1
            return
        dev = self._device(self._platform, to_int(det.get("dest")))
        if kind == H2D:
            src, dst = HOST, dev
        elif kind == D2H:
            src, dst = dev, HOST
        else:
            src, dst = f"{self._platform}:?", dev
        c = Copy(ts, kind, src, dst, size if size > 0 else -1, det.get("async") == "0", name, corr, ctx)
        c.hlo_op = "hlo_op" in st
        self.copies.append(c)
        self.host_only[name] += 1

    def close(self) -> None:
        """No more host calls: blit kernels still without a direction are assumed d2d."""
        rocm.assume_unpaired_blits(self.copies)

    def add(self, c: Copy) -> None:
        """A transfer that needs no pairing (a TPU host transfer)."""
        self.copies.append(c)

    def sources(self) -> list[str]:
        """What was recognized, for ``TraceData.source``."""
        out = []
        if self.device_names:
            part = "device copies: " + _listed(self.device_names)
            if self.paired:
                part += (" (their host calls, paired by correlation_id and not counted again: "
                         + _listed(self.paired) + ")")
            out.append(part)
        if self.host_only:
            out.append("host copy calls without a device event: " + _listed(self.host_only))
        return out

    def notes(self) -> list[str]:
        """Everything about the copies that is unknown or was assumed, in plain words."""
        out = []
        if self.host_only:
            out.append(f"{plural(sum(self.host_only.values()), 'copy', 'copies')} seen only as a "
                       "host call (no device-side event in the trace): counted from the host event")
        copies = self.copies
        for kind in (H2D, D2H, D2D):
            unknown = sum(1 for c in copies if c.kind == kind and c.bytes < 0)
            if unknown:
                out.append(f"{plural(unknown, kind + ' copy', kind + ' copies')}: no size in this "
                           "trace (bytes=-1, size unknown)")
        out += rocm.assumed_note(copies)
        dest_unknown = sum(1 for c in copies if c.kind == D2D and c.dst.endswith(":?"))
        if dest_unknown:
            out.append(f"{plural(dest_unknown, 'd2d copy', 'd2d copies')}: the other device is "
                       "not named (dst shown as ?)")
        hlo_copies = sum(1 for c in copies if c.kind == D2D and c.hlo_op)
        if hlo_copies:
            out.append(f"{plural(hlo_copies, 'd2d copy', 'd2d copies')}: part of an HLO op in a "
                       "compiled program (hlo_op stat), possibly a copy within one device")
        if self.unknown_direction:
            out.append(f"{plural(sum(self.unknown_direction.values()), 'host memcpy call')} of "
                       "unknown direction: not counted (" + ", ".join(sorted(self.unknown_direction)) + ")")
        return out
