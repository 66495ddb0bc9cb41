"""The store writer in a process of its own: SQLite work off the script's GIL and CPU core.

Why a process and not a thread: in-process, turning rows into stored rows and binding them in
``executemany`` held the GIL for ~5 µs per row, and an eager op makes ~2.7 rows — the script's
own thread waited for it (measured in bench/: the in-process writer added ~5–10 µs per eager
op on top of the hooks). Here the script's process only pops raw rows and pickles them
(~0.7 µs per row); formatting (``store/rows.py``) and inserting run in the child, on
the other core.

Protocol, on the child's stdin (one end of a socket pair): frames of an 8-byte little-endian length and a pickle of either
a ``Recorder.take()`` batch or ``("meta", key, value)``; a ``("close",)`` frame or EOF ends
it. The socket is private to the two processes (nothing read from a file is ever unpickled).
At the end the child prints one JSON line — rows written, rows lost, the first error, its own
peak RSS — and exits. If the script's process dies (SIGKILL), the child sees EOF, commits what
it received and exits: a killed run keeps every row that reached the child.

The child runs ``python -I`` (no PYTHONPATH: ``--follow-children``' bootstrap is not loaded)
in a session of its own (a Ctrl-C at the terminal goes to the script, not to the writer; the
script's end closes the writer).
"""
from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

from jaxplace_cli.model.raw import batch_rows

_PKG_PARENT = str(Path(__file__).resolve().parents[2])
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from jaxplace_cli.store.writer_process import serve; serve(*sys.argv[2:4])")
_HEADER = 8
DISPATCHED = "dispatched"  # a batch's key for the recorder's running counts (store/writer.py COUNTED)
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


def _rows(batch) -> int:
    return batch_rows(batch)


class WriterProcess:
    """The script-side end: ``write(batch)`` from the writer thread, ``close()`` once at the end.

    Has the attributes the session reads from an in-process ``StoreWriter`` (``rows_written``)
    plus what only a separate writer can know (``lost_rows``, ``error``, ``peak_rss_kb``)."""

    def __init__(self, path: Path, native: bool = False):
        self.path = Path(path)
        # A socket, not a pipe: MSG_NOSIGNAL. Writing to a pipe whose reader died raises
        # SIGPIPE, and a script that set SIGPIPE to SIG_DFL (common in command-line tools)
        # would be killed by it; on a socket the writer's death is an ordinary error here.
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOT, _PKG_PARENT, str(self.path),
                 "native" if native else "python"],
                stdin=theirs.fileno(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if hasattr(socket, "SO_NOSIGPIPE"):  # macOS: no MSG_NOSIGNAL, a socket option instead
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_NOSIGPIPE, 1)
        self._sock = ours
        self.pid = self.proc.pid
        self.sent = 0  # rows handed to the child
        self.rows_written = 0
        self.lost_rows = 0
        self.error = ""
        self.peak_rss_kb = 0
        self.sqlite = ""  # the child's connection: "c" (store/_sqlite.c) or "module" (sqlite3)
        self.committed: dict | None = None  # per counted table, from the child's report or the store

    def _send(self, obj) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._sock.sendall(len(data).to_bytes(_HEADER, "little"), _NOSIGNAL)
            self._sock.sendall(data, _NOSIGNAL)
        except OSError as exc:
            raise OSError(f"the writer process (pid {self.pid}) stopped taking rows "
                          f"({type(exc).__name__})") from None

    def write(self, batch: dict, dispatched: dict | None = None) -> None:
        n = _rows(batch)
        if n:
            if dispatched is not None:
                batch[DISPATCHED] = dispatched  # popped by serve() before the rows are read
            self._send(batch)  # raises OSError once the child is gone
            self.sent += n

    def set_meta(self, key: str, value: str) -> None:
        self._send(("meta", key, value))

    def close(self) -> None:
        """End the child and collect its account. Waits for it to write what it was sent (a
        backlog of a few hundred thousand rows takes seconds), never forever."""
        try:
            self._send(("close",))
        except OSError:
            pass
        self._sock.close()
        timeout = 60 + self.sent / 20_000
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            err = (err or b"") + f"did not finish within {timeout:.0f} s".encode()
        report = {}
        for line in (out or b"").decode("utf-8", "replace").splitlines()[-1:]:
            try:
                report = json.loads(line)
            except ValueError:
                pass
        if not isinstance(report, dict) or "rows_written" not in report:
            tail = (err or b"").decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            self.error = (f"the writer process (pid {self.pid}) exited with code "
                          f"{self.proc.returncode} {tail[0]}").strip()
            self.committed = stored_counts(self.path)
            self.rows_written = _count_rows(self.path)
            self.lost_rows = max(0, self.sent - self.rows_written)
            return
        committed = report.get("committed")
        self.committed = committed if isinstance(committed, dict) else None
        self.rows_written = int(report.get("rows_written", 0))
        # what the child counted as lost, or more if frames it never read were sent
        self.lost_rows = max(int(report.get("lost_rows", 0)), self.sent - self.rows_written)
        self.error = str(report.get("error", ""))
        self.peak_rss_kb = int(report.get("peak_rss_kb", 0))
        self.sqlite = str(report.get("sqlite", ""))


def stored_counts(path: Path) -> dict | None:
    """Rows of each counted table the store holds (what a dead child did commit); None if it
    cannot be read."""
    import sqlite3
    import urllib.parse

    from jaxplace_cli.store.writer import COUNTED

    uri = f"file:{urllib.parse.quote(os.fsencode(Path(path).absolute()))}?mode=ro"
    try:
        c = sqlite3.connect(uri, uri=True)
        try:
            return {t: c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in COUNTED}
        finally:
            c.close()
    except sqlite3.Error:
        return None


def _count_rows(path: Path) -> int:
    """Rows the database holds (what a dead child did commit); 0 if it cannot be read."""
    import sqlite3
    import urllib.parse

    from jaxplace_cli.store.schema import TABLES

    uri = f"file:{urllib.parse.quote(os.fsencode(Path(path).absolute()))}?mode=ro"  # '?', '#' in names
    try:
        c = sqlite3.connect(uri, uri=True)
        try:
            return sum(c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES)
        finally:
            c.close()
    except sqlite3.Error:
        return 0


RESERVE = ".events-reserve"  # the writer's reserve file beside the store (store/writer.py)


def open_writer(path: Path, native: bool = False):
    """A ``WriterProcess`` for ``path`` (its SQLite through ``store/_sqlite.c`` when ``native``
    and built); an in-process ``StoreWriter`` where no child Python can be started (an embedded
    interpreter, no ``sys.executable``, process limits)."""
    from jaxplace_cli.store.writer import StoreWriter

    if sys.executable and os.path.exists(sys.executable):
        try:
            return WriterProcess(path, native)
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return StoreWriter(path)


# -- the child ------------------------------------------------------------------------------------

def serve(path: str, native: str = "") -> None:
    """The writer process: frames from stdin into the store at ``path``, then one JSON line.

    Without the cyclic GC between batches: every row is a fresh tuple and a batch holds ~30k of
    them, so collections kept scanning live rows (bench/bench_writer.py: unpack + finish_rows
    3.6 -> 0.9 µs a row, issue 29). Rows are freed by reference counting; what little cyclic
    garbage there is (an exception's traceback) is collected every 64 batches."""
    import gc
    import resource

    from jaxplace_cli.model.raw import packed_module, unpack
    from jaxplace_cli.store.rows import finish_rows
    from jaxplace_cli.store.writer import StoreWriter, drop_reserve, make_reserve

    packed = packed_module()
    decoder = packed.Decoder() if packed is not None else None  # one per run: strings carry over

    written = lost = 0
    error = ""
    writer = None
    reserve = Path(path).with_name(RESERVE)
    try:
        writer = StoreWriter(Path(path), native=native == "native")
        make_reserve(reserve)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    stdin = sys.stdin.buffer
    gc.collect()
    gc.disable()
    batches = 0
    while True:
        batches += 1
        if batches % 64 == 0:
            gc.collect()
        head = stdin.read(_HEADER)
        if len(head) < _HEADER:
            break  # EOF: the script's process ended without a close frame (killed)
        size = int.from_bytes(head, "little")
        data = stdin.read(size)
        if len(data) < size:
            break  # the script's process died in the middle of a frame
        msg = pickle.loads(data)
        if type(msg) is tuple:
            if msg[0] == "close":
                break
            if msg[0] == "meta" and writer is not None:
                try:
                    writer.set_meta(msg[1], msg[2])
                except Exception:
                    pass
            continue
        dispatched = msg.pop(DISPATCHED, None)
        n = _rows(msg)
        if writer is not None and dispatched is not None:
            writer.dispatched = {t: max(writer.dispatched[t], int(dispatched.get(t, 0))) for t in writer.dispatched}
        if writer is None:
            lost += n
            continue
        try:
            writer.write(finish_rows(unpack(msg, decoder)), writer.dispatched)
        except Exception as exc:  # disk full, directory removed: count it and keep draining
            lost += n
            if not error:  # the first failure is the cause; later ones repeat it
                error = f"{type(exc).__name__}: {exc}"
    committed = None
    if writer is not None:
        written, committed = writer.rows_written, writer.committed
        writer.final_progress(error, reserve)  # the counts as they end (room made on a full disk)
        try:
            writer.close()
        except Exception:
            pass
    drop_reserve(reserve)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":
        peak //= 1024  # bytes there, KiB on Linux
    sys.stdout.write(json.dumps({"rows_written": written, "lost_rows": lost, "error": error,
                                 "peak_rss_kb": peak, "committed": committed,
                                 "sqlite": "" if writer is None else writer.sqlite}) + "\n")
    sys.stdout.flush()
