"""Record a block of real JAX work in this process (the 4 simulated CPU devices of conftest)
with the same hooks and recorder as ``jaxplace run`` (held through ``capture.recording``, as
``jaxplace run`` holds them), and hand back the stored rows."""
from __future__ import annotations

from contextlib import contextmanager

from jaxplace_cli.model.events import OpEvent, TransferEvent


class Recorded:
    def __init__(self):
        self.transfers: list[TransferEvent] = []
        self.ops: list[OpEvent] = []
        self.markers: list = []
        self.frees: list = []  # (buf, seq, how)
        self.sites: list = []  # the site rows the ops' and transfers' ``site`` ids name

    def of(self, kind: str, api: str | None = None) -> list[TransferEvent]:
        return [t for t in self.transfers if t.kind == kind and (api is None or t.api == api)]

    def total(self, kind: str) -> tuple[int, int]:
        ts = self.of(kind)
        return len(ts), sum(t.bytes for t in ts)


@contextmanager
def recorded(record: str = "all"):
    from jaxplace_cli.capture.recorder import Recorder
    from jaxplace_cli.capture.recording import Recording, installed_record

    rec = Recorder()
    out = Recorded()
    recording = Recording(rec, record)
    recording.start()
    try:
        # hooks someone else installed keep their mode: a test of "transfers" needs its own
        assert installed_record() == record, f"hooks installed as {installed_record()!r}, not {record!r}"
        yield out
    finally:
        recording.stop()
        rows = rec.drain()
        out.transfers = [TransferEvent(*t) for t in rows["transfers"]]
        out.ops = [OpEvent(*o) for o in rows["ops"]]
        out.markers = list(rows["markers"])
        out.frees = list(rows["frees"])
        out.sites = list(rows["sites"])
