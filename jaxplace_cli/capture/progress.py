"""The live status line of ``jaxplace run`` on a terminal: elapsed time, ops, transfers and
bytes by kind, the busiest transfer site so far — on stderr, never in the script's output.

How it stays out of the script's output: the line lives on the terminal's last row, outside a
scroll region (DECSTBM) set to the rows above it, as ``apt`` draws its progress bar. The
script writes where it always writes (its own ``sys.stdout``/``sys.stderr``, untouched) and
scrolls only the region; the status is redrawn in place by one ``write()`` (save cursor, go to
the last row, erase, text, restore cursor), which the tty layer does not interleave with
another process's or thread's write. Nothing is drawn unless stderr is a terminal of at least
3 rows (and ``jaxplace run`` asks for it only without ``--quiet``); at the end the row is
erased and the scroll region reset, before the script's traceback or jaxplace's summary.

The numbers come from the rows the writer thread takes from the recorder every 0.25 s (a
wrapper around ``Recorder.take``): nothing is added to the hooks' hot path; tallying costs
the writer thread ~0.2 µs per transfer row.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.paths import file_name
from jaxplace_cli.model.raw import PACKED, packed_module
from jaxplace_cli.model.safe import plain
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.store.writer import ServiceThread

_KIND = 3  # TransferEvent fields: kind, bytes, site (raw rows keep the field order)
_BYTES = 6
_SITE = 10
DIM, BOLD, RESET = "\x1b[2m", "\x1b[1m", "\x1b[0m"


class LiveStatus:
    """Started by ``start(recorder)`` (None where stderr is no terminal), ended by ``stop()``."""

    def __init__(self, recorder, fd: int, rows: int, interval: float = 0.25):
        self.fd, self.rows, self.interval = fd, rows, interval
        self.t0 = time.monotonic()
        self.ops = 0
        self.kinds = {k: [0, 0] for k in TRANSFER_KINDS}  # kind -> [count, bytes]
        self.sites: dict = {}  # (site, kind) -> bytes
        self._recorder = recorder
        self._take = recorder.take
        self._decoder = None  # for packed rows (model/_packed.c), made at the first batch that has them
        recorder.take = self._tallying_take  # the writer thread's drain looks it up on the instance
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = ServiceThread(target=self._loop, name="jaxplace-status", daemon=True)

    @classmethod
    def start(cls, recorder, stream=None) -> LiveStatus | None:
        stream = stream if stream is not None else sys.stderr
        try:
            fd = stream.fileno()
            if not os.isatty(fd):
                return None
            rows = os.get_terminal_size(fd).lines
        except (AttributeError, ValueError, OSError):
            return None
        if rows < 3:
            return None
        status = cls(recorder, fd, rows)
        # reserve the last row: a newline (scrolls if the cursor is there), the region above
        # it, the cursor back where it was
        status._write(f"\n\x1b7\x1b[1;{rows - 1}r\x1b8\x1b[1A")
        status._thread.start()
        return status

    def _tallying_take(self):
        batch = self._take()
        rows = batch.get("transfers") or ()
        n_ops = len(batch.get("ops") or ())
        packed = batch.get(PACKED)
        if packed is not None:  # the native path's rows, as bytes: a decoder of our own reads them
            if self._decoder is None:
                self._decoder = packed_module().Decoder()  # sees every batch, in order, as it must
            p_ops, p_transfers, _ = self._decoder.decode(packed[0])
            rows, n_ops = [*rows, *p_transfers], n_ops + len(p_ops)
        with self._lock:
            self.ops += n_ops
            kinds, sites = self.kinds, self.sites
            for r in rows:
                try:
                    kind, nbytes, site = r[_KIND], r[_BYTES], r[_SITE]
                except (IndexError, TypeError):
                    continue
                k = kinds.get(kind)
                if k is None:
                    continue
                k[0] += 1
                if nbytes > 0:
                    k[1] += nbytes
                    sites[(site, kind)] = sites.get((site, kind), 0) + nbytes
        return batch

    def line(self, width: int) -> str:
        """The status text, at most ``width`` visible characters (styles not counted)."""
        with self._lock:
            parts = [f"{time.monotonic() - self.t0:6.1f}s", f"{self.ops:,} ops"]
            parts += [f"{k} {c:,} ({human_bytes(b)})" for k, (c, b) in self.kinds.items() if c] or ["no transfers"]
            busiest = max(self.sites.items(), key=lambda kv: kv[1], default=None)
        text = "jaxplace · " + " · ".join(parts)
        if busiest is not None:
            (site, kind), nbytes = busiest
            where = plain(self._recorder.site_text(site) or "?")
            path, _, line = where.rpartition(":")
            text += f" · busiest: {file_name(path) or where}:{line} {kind} {human_bytes(nbytes)}"
        text = text[:max(1, width - 1)]
        return f"{DIM}{text[:10]}{RESET}{BOLD}{text[10:]}{RESET}" if len(text) > 10 else text

    def _write(self, data: str) -> None:
        try:
            os.write(self.fd, data.encode("utf-8", "replace"))
        except OSError:
            self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.draw()

    def draw(self) -> None:
        try:
            size = os.get_terminal_size(self.fd)
        except OSError:
            return
        if size.lines != self.rows and size.lines >= 3:  # resized: move the region
            self._write(f"\x1b7\x1b[{self.rows};1H\x1b[2K\x1b[1;{size.lines - 1}r\x1b8")
            self.rows = size.lines
        self._write(f"\x1b7\x1b[{self.rows};1H\x1b[2K{self.line(size.columns)}\x1b8")

    def stop(self) -> None:
        """Erase the line, give the terminal its whole height back, unhook from the recorder."""
        if self._stop.is_set() and not self._thread.is_alive():
            return
        self._stop.set()
        if self._thread.is_alive() and self._thread.ident != threading.get_ident():
            self._thread.join(timeout=2)
        self._write(f"\x1b7\x1b[{self.rows};1H\x1b[2K\x1b[r\x1b8")
