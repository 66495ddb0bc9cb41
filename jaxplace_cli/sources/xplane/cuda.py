"""NVIDIA (CUPTI, as recorded by XLA and TensorFlow): the names of copies.

Device side, on a GPU plane's ``Stream #N`` lines: ``MemcpyH2D``/``MemcpyD2H``/``MemcpyD2D``/
``MemcpyP2P`` activities, with ``memcpy_details`` (``'size:6144 dest:4 async:1'``) and the
``correlation_id`` of the driver call that enqueued them. Host side: the driver/runtime calls
``cuMemcpy*``/``cudaMemcpy*`` (paired with the device copy by :mod:`.pairing`).
"""
from __future__ import annotations

from jaxplace_cli.model.events import D2D, D2H, H2D
from jaxplace_cli.model.sizes import plural

DEVICE_COPY = {
    "MemcpyH2D": H2D,
    "MemcpyD2H": D2H,
    "MemcpyD2D": D2D,
    "MemcpyP2P": D2D,
}
HOST_API_PREFIXES = ("cuMemcpy", "cudaMemcpy")

# TensorFlow's collective executor logs a host event of this name per copy it schedules, with
# no device, direction or size: it is never counted, only mentioned.
TF_MEMCPY_ASYNC = "MemCpyAsync"


def tf_memcpy_async_note(n: int) -> list[str]:
    if not n:
        return []
    return [f"{plural(n, TF_MEMCPY_ASYNC + ' host event')} (TF collective executor): not "
            "counted (no device, direction or size recorded)"]
