"""The store writer in a process of its own: SQLite work off the script's GIL and CPU core.

Why a process and not a thread: in-process, turning rows into stored rows and binding them in
``executemany`` held the GIL for ~5 µs per row, and an eager op makes ~2.7 rows — the script's
own thread waited for it (measured in bench/: the in-process writer added ~5–10 µs per eager
op on top of the hooks). Here the script's process only pops raw rows and pickles them
(~0.7 µs per row); formatting (``store/rows.py``) and inserting run in the child, on
the other core.

Protocol, on the child's stdin (one end of a socket pair): frames of an 8-byte little-endian length and a pickle of either
a ``Recorder.take()`` batch or ``("meta", key, value)``; a ``("close", linger)`` frame or EOF ends
it. The socket is private to the two processes (nothing read from a file is ever unpickled).
At the end the child prints one JSON line — rows written, rows lost, the first error, its own
peak RSS — and exits. If the script's process dies (SIGKILL), the child sees EOF, commits what
it received and exits: a killed run keeps every row that reached the child.

After the report the child can stay (``close(linger=True)``) for work its parent would rather
not do itself: ``("call", module, function, kwargs)`` frames, each answered with one JSON line
(``jaxplace run``'s end-of-run verdict: the audit's ~100 modules are imported here while the
script runs, ``("preload", modules)``, instead of in the script's process after it: issue 29).
Only ``jaxplace_cli`` functions, and only from the parent's end of the private socket. A last
``("print", module, function, kwargs, encoding, fallback)`` frame is answered with the lines
themselves, encoded and ended by a NUL, which the parent writes on its stderr after its own
teardown (``print_at_exit``); the child leaves after it.

The child runs ``python -I`` (no PYTHONPATH: ``--follow-children``' bootstrap is not loaded)
in a session of its own (a Ctrl-C at the terminal goes to the script, not to the writer; the
script's end closes the writer). It is started through ``/bin/sh`` as the script's grandchild,
not its child: a script that waits for "any child" (``os.wait()`` until ChildProcessError, a
SIGCHLD handler reaping ``waitpid(-1)``) must not find jaxplace's process among its children —
``os.wait()`` with none of its own left waited forever for the writer. (Where jaxplace is the
reaper of orphans — PID 1 of a container run without ``--init``, a child subreaper — the writer
comes back to it as its child and such a wait still waits for it.) The shell is gone in
~1 ms (waited for here); the writer's pid is the shell's ``$!``, and its exit is the end of its
pipes (no exit status: it is not ours to reap).
"""
from __future__ import annotations

import json
import os
import pickle
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from jaxplace_cli.model.raw import batch_rows

_PKG_PARENT = str(Path(__file__).resolve().parents[2])
# os._exit: everything is committed and reported by then; the interpreter's teardown (its modules,
# numpy's among them once the verdict was made here) is not worth the parent's wait
_BOOT = ("import os, sys; sys.path.insert(0, sys.argv[1]); "
         "from jaxplace_cli.store.writer_child import serve; serve(*sys.argv[2:4]); "
         "sys.stdout.flush(); os._exit(0)")
# the writer in the background of a shell that leaves at once (the script's grandchild); stdin
# saved as fd 3 first: a non-interactive shell gives a background command /dev/null as stdin
_DETACH = 'exec 3<&0; "$@" <&3 3<&- & echo "$!"'
_SH = "/bin/sh"
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
        argv = [sys.executable, "-I", "-c", _BOOT, _PKG_PARENT, str(self.path), "native" if native else "python"]
        self._detached = detached = os.path.exists(_SH)
        try:
            self.proc = subprocess.Popen(
                [_SH, "-c", _DETACH, "sh", *argv] if detached else argv,
                stdin=theirs.fileno(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True,
                # numpy for the verdict (cli/run_summary.py) but no linear algebra: no OpenBLAS
                # thread beside the script (~1 % of a P2 run's CPU samples was its idle loop)
                env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if hasattr(socket, "SO_NOSIGPIPE"):  # macOS: no MSG_NOSIGNAL, a socket option instead
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_NOSIGPIPE, 1)
        self._sock = ours
        self._pending = b""  # the child's stdout read so far, past the last whole line
        self._eof = False  # its stdout ended (the child is gone)
        self.ended = False  # end() saw its pipes end (it is gone)
        self.killed = False  # end() had to kill it (it did not leave within the timeout)
        self.pid = self.proc.pid
        if detached:
            self.proc.wait()  # the shell: gone once it started the writer
            line = self._read_line(5.0)
            if line is None or not line.strip().isdigit():
                for f in (ours, self.proc.stdout, self.proc.stderr):
                    f.close()
                raise OSError("the writer process did not start")
            self.pid = int(line)
        self.sent = 0  # rows handed to the child
        self.rows_written = 0
        self.lost_rows = 0
        self.error = ""
        self.peak_rss_kb = 0
        self.sqlite = ""  # the child's connection: "c" (store/_sqlite.c) or "module" (sqlite3)
        self.committed: dict | None = None  # per counted table, from the child's report or the store
        self.lingering = False  # closed with linger=True: the child waits for call() until end()
        self._out_tail = b""  # what communicate() collected at the end
        self._err_tail = b""

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

    def preload(self, modules: list[str]) -> None:
        """Have the child import ``modules`` now (before any rows: while the script imports
        JAX), for a ``call`` after the run."""
        self._send(("preload", list(modules)))

    def close(self, linger: bool = False) -> None:
        """End the child's writing and collect its account: waits for it to write what it was
        sent (a backlog of a few hundred thousand rows takes seconds), never forever.
        ``linger``: the child stays for ``call`` until ``end()`` (or this process's exit)."""
        try:
            self._send(("close", linger))
        except OSError:
            pass
        timeout = 60 + self.sent / 20_000
        line = self._read_line(timeout) if linger else None
        report = _report_of(line)
        if report is None:
            if linger:  # it may still report, then wait for calls: told to leave instead
                self.lingering = True
            self.end(timeout)
            report = _report_of(self._pending + self._out_tail)
        if report is None:
            tail = self._err_tail.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            code = "" if self._detached else f" with code {self.proc.returncode}"
            self.error = f"the writer process (pid {self.pid}) exited{code} {tail[0]}".strip()
            self.committed = stored_counts(self.path)
            self.rows_written = _count_rows(self.path)
            self.lost_rows = max(0, self.sent - self.rows_written)
            return
        self.lingering = linger and not self.ended
        committed = report.get("committed")
        self.committed = committed if isinstance(committed, dict) else None
        self.rows_written = int(report.get("rows_written", 0))
        # what the child counted as lost, or more if frames it never read were sent
        self.lost_rows = max(int(report.get("lost_rows", 0)), self.sent - self.rows_written)
        self.error = str(report.get("error", ""))
        self.peak_rss_kb = int(report.get("peak_rss_kb", 0))
        self.sqlite = str(report.get("sqlite", ""))

    def call(self, module: str, function: str, kwargs: dict, timeout: float):
        """``module.function(**kwargs)`` in the lingering child; its JSON-able result. Raises
        ``OSError`` when the child cannot answer (gone; ``TimeoutError`` when there is no answer
        within ``timeout``: then it is ended) and ``RuntimeError`` with the child's exception."""
        if not self.lingering:
            raise OSError("the writer process is not waiting for calls")
        try:
            self._send(("call", module, function, kwargs))
            line = self._read_line(timeout)
        except BaseException:  # the child is gone, or a Ctrl-C while it works: no answer wanted
            self.end(0)
            raise
        try:
            answer = json.loads(line) if line is not None else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            gone = self._eof or self.ended or (not self._detached and self.proc.poll() is not None)
            self.end(0)
            raise (OSError if gone else TimeoutError)(
                f"the writer process (pid {self.pid}) gave no answer{'' if gone else f' within {timeout:.0f} s'}")
        if "error" in answer:
            raise RuntimeError(str(answer["error"]))
        return answer.get("result")

    def print_at_exit(self, module: str, function: str, kwargs: dict, timeout: float, fallback: str,
                      stream, register) -> bool:
        """Have the lingering child make ``module.function(**kwargs)``'s lines now, and this
        process write them on ``stream`` (its stderr, file descriptor 2) at the very end of its
        exit: the child works while this interpreter tears down instead of the script's process
        waiting for it before (issue 29). ``register`` is what writes them then
        (capture/_native.c ``print_at_exit``: no Python code runs there). False where that
        cannot be arranged (no lingering child, a stream that is not fd 2): then nothing was
        sent and ``call`` still works."""
        try:
            if not self.lingering or self._pending or stream.fileno() != 2:
                return False
            encoding = (str(stream.encoding), str(stream.errors or "strict"))
            last = fallback.encode(*encoding) + b"\n"
            fd = os.dup(self.proc.stdout.fileno())
        except Exception:  # noqa: BLE001 - no file descriptor, an unknown encoding
            return False
        try:
            stream.flush()
            register(fd, timeout, last, self)  # this object's pipes stay open till then
        except Exception:  # noqa: BLE001 - registered once already: the caller prints instead
            os.close(fd)
            return False
        try:
            self._send(("print", module, function, kwargs, encoding, fallback))
        except OSError:  # the child is gone: the C side reads the end of its pipe, writes the fallback
            pass
        self.lingering = False  # the child leaves once it wrote the lines (a fork of the script may hold the socket)
        return True

    def end(self, timeout: float = 5.0) -> None:
        """Let the child go and reap it; safe to call twice. Said in a frame, not by closing the
        socket alone: a process the script forked holds the socket too, and the child would
        never see its input end."""
        if self.lingering:
            try:
                self._send(("end",))
            except OSError:
                pass
        self.lingering = False
        try:
            self._sock.close()
        except OSError:
            pass
        if self.ended:
            return
        try:
            out, err = self.proc.communicate(timeout=timeout)  # till the child's pipes end
        except subprocess.TimeoutExpired:
            self.killed = True
            if self._detached:  # the session the shell led holds only the writer now
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
            else:
                self.proc.kill()
            out, err = self.proc.communicate()
            err = (err or b"") + f"did not finish within {timeout:.0f} s".encode()
        self.ended = True  # not before: a Ctrl-C in the wait leaves it to a second end()
        self._out_tail += out or b""
        self._err_tail += err or b""

    def _read_line(self, timeout: float) -> bytes | None:
        """One line of the child's stdout, or None at its end or after ``timeout`` seconds."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = os.read(fd, 65536)
                if not chunk:
                    self._eof = True
                    return None
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line


def _report_of(data) -> dict | None:
    """The child's closing account: the last line of ``data`` when it is one."""
    for line in (data or b"").decode("utf-8", "replace").splitlines()[-1:]:
        try:
            report = json.loads(line)
        except ValueError:
            return None
        return report if isinstance(report, dict) and "rows_written" in report else None
    return None


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

    if sys.executable and os.access(sys.executable, os.X_OK):  # the shell would start it blind
        try:
            return WriterProcess(path, native)
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return StoreWriter(path)
