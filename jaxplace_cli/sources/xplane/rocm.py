"""AMD (ROCm, as recorded by XLA's rocm tracer): the names of copies, and the copy kernels.

Device side: ``CopyHostToDevice``/``CopyDeviceToHost``/``CopyDeviceToDevice``/``CopyPeerToPeer``
activities (``memcpy_details`` as for CUDA, but ``size:0`` means "not recorded" and ``dest:512``
names no device), and ``__amd_rocclr_copyBuffer*`` blit kernels: copies that carry no size and
no direction. Their ``hipMemcpy*`` host call, paired by :mod:`.pairing`, says the direction;
one without a host call is counted as d2d and a note says the direction was assumed.
"""
from __future__ import annotations

from jaxplace_cli.model.events import D2D, D2H, H2D, HOST
from jaxplace_cli.model.sizes import plural
from jaxplace_cli.sources.xplane.common import Copy

DEVICE_COPY = {
    "CopyHostToDevice": H2D,
    "CopyDeviceToHost": D2H,
    "CopyDeviceToDevice": D2D,
    "CopyPeerToPeer": D2D,
}
BLIT_PREFIX = "__amd_rocclr_copyBuffer"  # copy kernels: a copy, direction from the host call
HOST_API_PREFIXES = ("hipMemcpy",)


def enrich_blit(c: Copy, kind: str | None, det: dict[str, str]) -> None:
    """What a blit kernel learns from its paired host call: the direction and the async flag."""
    if c.kind is None and kind is not None:
        c.kind = kind
        if kind == H2D:
            c.src, c.dst = HOST, c.src
        elif kind == D2H:
            c.dst = HOST
    if c.api.startswith(BLIT_PREFIX) and "async" in det:
        c.blocking = det["async"] == "0"


def assume_unpaired_blits(copies: list[Copy]) -> None:
    """A blit kernel whose host call was not found: counted as d2d, marked as assumed."""
    for c in copies:
        if c.kind is None:
            c.kind, c.assumed_kind = D2D, True


def assumed_note(copies: list[Copy]) -> list[str]:
    assumed = sum(1 for c in copies if c.assumed_kind)
    if not assumed:
        return []
    return [f"{plural(assumed, BLIT_PREFIX + ' kernel')}: no matching host memcpy call, so the "
            "direction is unknown; counted as d2d"]
