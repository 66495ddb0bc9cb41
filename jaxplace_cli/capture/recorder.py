"""In-process recorder: the cheap, thread-safe sink that hooks write events into.

Everything on the hot path is an append of a tuple to one of the recorder's tables (atomic
under the GIL, so threads need no lock): a deque, or once a writer is attached a Sink that
packs the row at once (model/_packed.c). Work that is not needed to *capture* a fact — formatting shapes, joining buffer
ids — is deferred to ``store/rows.py``, which runs in the writer process (the row shapes: model/raw.py).
"""
from __future__ import annotations

import itertools
import json
import linecache
import os
import sys
import sysconfig
import threading
from collections import deque
from pathlib import Path
from time import perf_counter_ns

from jaxplace_cli.capture.frames import LAUNCHERS
from jaxplace_cli.capture.stacks import LIBRARY, TRANSFER_FIELDS, USER, Stacks
from jaxplace_cli.model.events import MARKER_SITE_TEXT, Marker, OpEvent, Site, TransferEvent
from jaxplace_cli.model.raw import PACKED

_JAXPLACE_DIR = str(Path(__file__).resolve().parents[1]) + os.sep  # the jaxplace_cli package

BUF_ATTR = "_jaxplace_buf"

# Frame tiers: 2 = the user's code, 1 = a third-party library, 0 = JAX/jaxplace/stdlib.
INTERNAL = 0


def _internal_prefixes() -> tuple[str, ...]:
    prefixes = {_JAXPLACE_DIR}
    for mod in ("jax", "jaxlib", "numpy", "ml_dtypes", "opt_einsum"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            prefixes.add(str(Path(m.__file__).resolve().parent) + os.sep)
            prefixes.add(str(Path(m.__file__).parent) + os.sep)
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            prefixes.add(os.path.join(p, ""))
    return tuple(prefixes)


def _library_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.join(paths[k], "") for k in ("purelib", "platlib") if k in paths})


class Recorder(Stacks):
    """Collects events from hooks; ``take()`` hands raw rows to the store writer."""

    # What the C hot path reads on every op (capture/_native.c `field`): as slots it reads them
    # at their offsets, without an attribute lookup. Every other attribute stays in __dict__.
    __slots__ = ("seqs", "buf_ids", "ops", "transfers", "buffers", "tail", "t0", "on_transfer",
                 "mem_state", "backlog_limit")

    def __init__(self, maxlen: int | None = None) -> None:
        """``maxlen`` bounds every buffer (oldest dropped): for in-process use with no writer
        draining it, e.g. ``device_placement`` outside ``jaxplace run``."""
        # The emit API of the hot path (capture/jaxhooks/): hooks draw sequence numbers and buffer
        # ids from these counters and append raw rows (model/raw.py) to the deques below; a
        # method call per event would cost ~0.1 us each on every eager op.
        self.seqs = itertools.count(1)
        self.buf_ids = itertools.count(1)
        self.ops: deque = deque(maxlen=maxlen)
        self.transfers: deque = deque(maxlen=maxlen)
        self.buffers: deque = deque(maxlen=maxlen)  # raw tuples, formatted by finish_rows()
        self.markers: deque = deque(maxlen=maxlen)
        self._new_sites: deque = deque(maxlen=maxlen)
        self._sites: dict = {}  # (id(code), instruction offset) -> site id
        self._site_by_line: dict = {}  # (file, line, function) -> site id
        self._site_ids = itertools.count(1)
        self._init_stacks(maxlen)  # call stacks (issue 28, capture/stacks.py)
        # id(code) -> tier. Keyed on id(), not on the code object: hashing a code object hashes
        # its constants, recursively through nested code objects (~0.2 us for a small function,
        # far more for a module body), and site_of does it for every frame it walks, per op.
        # _codes keeps each code object alive, so an id stays unique while it is a key.
        self._tiers: dict = {}
        self._codes: list = []
        self._internal = _internal_prefixes()
        self._library = _library_prefixes()
        self.counts = {"ops": 0, "transfers": 0}
        self.on_transfer = None  # set while a profiler trace is open (TraceAnnotations)
        self._site_text: dict = {}  # site id -> "file:line"
        self.site_info: dict = {}  # site id -> Site (policies match on file/line/function)
        # The device-queue model of capture/jaxhooks/syncs.py: per device label, the first
        # buffer id of the newest op dispatched there, and the id up to which the host knows
        # the device finished (it waited on a value at least that new)
        self.tail: dict = {}
        self.synced: dict = {}
        self.progs: dict = {}  # the newest compiled program's buffer ids per device
        self.t0 = perf_counter_ns()
        # Back-pressure: with a writer draining the buffers (``attach_writer``), a backlog of
        # more than ``backlog_limit`` rows makes the dispatching thread wait for the next drain,
        # so memory stays flat at any event rate; the waits are reported in run.json.
        self.backlog_limit: int | None = None
        self.backpressure_waits = 0
        self.backpressure_ns = 0
        self._want_drain = None  # threading.Event the writer thread wakes on
        # With a writer attached and the native path loaded (attach_writer): a RowBuffer
        # (model/_packed.c), and ops/transfers/buffers become its Sinks; the deques stay here
        # as what take() pops (rows a Sink could not pack, or every row without one).
        self.packed = None
        self._deques = (self.ops, self.transfers, self.buffers)
        # Failures of the recording itself (a hook's own error): counted, never raised into
        # the user's program, which keeps its result (recording_failed)
        self.recording_errors = 0
        self.first_recording_error = ""
        self._decoder = None  # unpacks them for an in-process writer (drain)
        # Device memory (issue 27, capture/memory.py): frees of the buffers rows name
        from jaxplace_cli.capture.memory import Tracker

        self.memory = Tracker(self.seqs, maxlen)
        self.track = self.memory.track  # the hot paths call it on every new buffer
        self.mem_state = self.memory.state  # the C path's inlined track (capture/_native.c)
        self._drained = threading.Condition()
        self._drains = 0
        from jaxplace_cli.capture import native

        mod = native.module()
        if mod is not None:  # the C frame walk and caches (capture/_native.c); the rules stay here
            self.site_of = mod.SiteCache(self._tier, self._intern_site, self._intern_node)
            self.stack_of = self.site_of.stack

    # -- identities -------------------------------------------------------------------------
    def next_seq(self) -> int:
        return next(self.seqs)

    def _tier(self, code) -> int:
        """The most specific directory decides: on a system or conda Python, site-packages
        lies inside the standard library's directory, and numpyro or equinox there are
        libraries (their frames are skipped for the user's line, and never name an API), while
        jax inside the same site-packages stays internal."""
        fn = code.co_filename
        if (fn.startswith("<") and fn != "<stdin>") or fn in LAUNCHERS:  # `jaxplace run -`'s script is the
            tier = INTERNAL  # user's; LAUNCHERS: the `jaxplace` command's own file
        else:
            internal = max((len(p) for p in self._internal if fn.startswith(p)), default=-1)
            library = max((len(p) for p in self._library if fn.startswith(p)), default=-1)
            tier = USER if internal < 0 and library < 0 else LIBRARY if library > internal else INTERNAL
        self._tiers[id(code)] = tier
        self._codes.append(code)
        return tier

    def site_of(self, frame) -> int:
        """Site id of the first user frame at or above ``frame`` (a library frame if none)."""
        tiers = self._tiers
        fallback = None
        f = frame
        while f is not None:
            code = f.f_code
            tier = tiers.get(id(code))
            if tier is None:
                tier = self._tier(code)
            if tier == USER:
                break
            if tier == LIBRARY and fallback is None:
                fallback = f
            f = f.f_back
        else:
            f = fallback
            if f is None:
                return 0
        # Keyed on the instruction offset: f_lineno decodes the line table linearly (slow in
        # big module-level code), f_lasti is a field read. Offsets on one line share a site.
        key = (id(f.f_code), f.f_lasti)
        sid = self._sites.get(key)
        if sid is None:
            sid = self._intern_site(key, f)
        return sid

    def _intern_site(self, key, f) -> int:
        code = f.f_code
        line_key = (code.co_filename, f.f_lineno, code.co_name)
        sid = self._site_by_line.get(line_key)
        if sid is None:
            sid = self._site_by_line[line_key] = next(self._site_ids)
            self._site_text[sid] = f"{line_key[0]}:{line_key[1]}"
            self.site_info[sid] = site = Site(sid, *line_key)
            self._new_sites.append(site)
            self._site_source(sid, line_key)
        self._sites[key] = sid
        return sid

    def _site_source(self, sid: int, line_key) -> None:
        """The stripped source text of a new site, as a ``site-text`` marker (seq 0: no event's
        order moves): ``diff`` matches sites by it, so an edit elsewhere in the file changes
        nothing (issue 26). Once per site; a file the recorder cannot read has none."""
        try:
            text = linecache.getline(line_key[0], line_key[1]).strip()
            if text:
                self.markers.append(Marker(0, perf_counter_ns() - self.t0, MARKER_SITE_TEXT,
                                           json.dumps([sid, text[:500]])))
        except Exception as exc:  # never the user's problem
            self.recording_failed(exc)

    def user_frame_and_caller(self, frame):
        """(first user frame, the outermost internal frame just below it) — used to name the
        API a user called, e.g. ``__float__`` for ``float(x)``."""
        tiers = self._tiers
        below = None
        f = frame
        while f is not None:
            code = f.f_code
            tier = tiers.get(id(code))
            if tier is None:
                tier = self._tier(code)
            if tier != INTERNAL:
                return f, below
            below = f
            f = f.f_back
        return None, below

    def buffer_id(self, arr, device: str, committed: bool, site: int, seq: int) -> int:
        """The jaxplace identity of ``arr``; assigns one (and logs a BufferEvent) if new.

        Kept in the array's ``__dict__``: a dict get is ~20x cheaper than a failing getattr
        (an exception) on a freshly dispatched array, and ids never collide like ``id()``s."""
        try:
            d = arr.__dict__
        except AttributeError:
            return 0
        b = d.get(BUF_ATTR)
        if b is None:
            b = d[BUF_ATTR] = next(self.buf_ids)
            aval = arr.aval
            # shape (ints) + dtype name: a tuple of atoms, which the GC stops tracking, so a
            # backlog of events costs the user's program no collection time
            dtype = aval.dtype
            name = _DTYPE_NAMES.get(dtype) or dtype_name(dtype)
            self.buffers.append((b, seq, device, aval.shape, name, committed, site))
            self.track(arr, b, site, device)
        return b

    # -- events -----------------------------------------------------------------------------
    def add_transfer(self, ev) -> None:
        """``ev``: a TransferEvent or a tuple in its field order; + its stack (capture/stacks.py)."""
        if len(ev) == TRANSFER_FIELDS:
            ev = self.with_stack(ev, sys._getframe(1))
        self.transfers.append(ev)
        if self.on_transfer is not None:
            self.on_transfer(ev)

    def site_text(self, sid: int) -> str:
        return self._site_text.get(sid, "")

    def marker(self, kind: str, value: str) -> None:
        self.markers.append(Marker(next(self.seqs), perf_counter_ns() - self.t0, kind, value))

    def recording_failed(self, exc: BaseException) -> None:
        """A hook failed to record a call that itself went as it would under plain python:
        the call's result (or its own error) stands; this counts the failure and keeps the first
        one's text (``recording_error_line``, said once at the end of the run). Never raises."""
        try:
            self.recording_errors += 1
            if not self.first_recording_error:
                self.first_recording_error = _error_text(exc)
        except Exception:
            pass

    def recording_error_line(self) -> str:
        """One sentence for the end of the run ("" when recording never failed)."""
        n = self.recording_errors
        if not n:
            return ""
        return (f"{n} call{'s' if n != 1 else ''} could not be recorded (the program's results are "
                f"unaffected; the run's rows are incomplete); the first: {self.first_recording_error}")

    # -- back-pressure ----------------------------------------------------------------------
    def attach_writer(self, want_drain, limit: int = 32_768) -> None:
        """A writer thread drains this recorder: from now on a backlog over ``limit`` rows
        wakes it (``want_drain``) and waits for its next ``take``. 32k rows: measured on the
        1M- and 3M-event runs of bench P3, the writer process peaked at 44-52 MB (104-121 MB
        with 131k, growing with the run) and the script at +26 MB over plain python."""
        self._want_drain = want_drain
        self.backlog_limit = limit
        from jaxplace_cli.capture import native

        if native.module() is not None and self.packed is None:
            from jaxplace_cli.model.raw import packed_module

            # every path's rows packed as they are appended (the Python hooks' too: a backlog
            # of tuples from jit calls with pytree arguments kept the collector busy, bench
            # P1); the deques stay as the fallback for a row the packer cannot hold
            self.packed = packed_module().RowBuffer()
            self.ops, self.transfers, self.buffers = (self.packed.sink(i, dq) for i, dq in enumerate(self._deques))

    def detach_writer(self) -> None:
        """No writer any more (the run is ending): never wait again."""
        self.backlog_limit = None
        with self._drained:
            self._drained.notify_all()

    def wait_for_writer(self) -> None:
        """Block the calling (dispatching) thread until the writer has taken the backlog, or 5 s
        passed (a stuck writer slows the script, never stops it)."""
        if self.backlog_limit is None or self._want_drain is None:
            return
        t0 = perf_counter_ns()
        with self._drained:
            seen = self._drains
            self._want_drain.set()
            self._drained.wait_for(lambda: self._drains != seen or self.backlog_limit is None, timeout=5.0)
        self.backpressure_waits += 1
        self.backpressure_ns += perf_counter_ns() - t0

    def take(self) -> dict[str, list]:
        """Pop everything recorded so far, rows exactly as the hooks left them.

        Cheap on purpose (a popleft per row): it runs in the script's process, under the GIL
        the script needs. Turning raw rows into stored rows is ``finish_rows``' job, done in the
        writer process (store/writer_process.py) or by ``drain()``."""
        ops, transfers, buffers = self._deques
        batch = {
            "sites": _pop_all(self._new_sites),
            "stacks": _pop_all(self._new_nodes),
            "ops": _pop_all(ops),
            "transfers": _pop_all(transfers),
            "buffers": _pop_all(buffers),
            "markers": _pop_all(self.markers),
        }
        batch["frees"], batch["shards"] = self.memory.take()
        self.counts["ops"] += len(batch["ops"])
        self.counts["transfers"] += len(batch["transfers"])
        if self.packed is not None and self.packed.pending:
            data, n_ops, n_transfers, n_buffers = self.packed.take()
            batch[PACKED] = (data, n_ops + n_transfers + n_buffers)
            self.counts["ops"] += n_ops
            self.counts["transfers"] += n_transfers
        if self.backlog_limit is not None:  # someone may wait for this drain (detach wakes the rest)
            with self._drained:
                self._drains += 1
                self._drained.notify_all()
        return batch

    def drain(self) -> dict[str, list]:
        """Pop everything recorded so far as rows ready for the store (in-process writers)."""
        from jaxplace_cli.model.raw import packed_module, unpack
        from jaxplace_cli.store.rows import finish_rows

        batch = self.take()  # rows of the Python path are sorted by unpack too
        if PACKED in batch and self._decoder is None:
            self._decoder = packed_module().Decoder()
        return finish_rows(unpack(batch, self._decoder))


def _error_text(exc: BaseException) -> str:
    """``Type: first line (file:line)``: where in jaxplace the recording failed."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        where = f" ({Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno})"
        tb = tb.tb_next
    return f"{type(exc).__name__}: {text}"[:500] + where


def _pop_all(dq: deque) -> list:
    # popleft, not list(dq) + clear(): hooks on other threads may append meanwhile
    n = len(dq)
    pop = dq.popleft
    return [pop() for _ in range(n)]


_DTYPE_NAMES: dict = {}  # dtype -> (name, itemsize); hot paths read it, dtype_name fills it


def dtype_name(dtype) -> tuple[str, int]:
    """(name, itemsize) of ``dtype``, cached in _DTYPE_NAMES (callers try the dict first)."""
    name = _DTYPE_NAMES[dtype] = (str(dtype), dtype.itemsize)
    return name

_ITEMSIZE_CACHE: dict = {}


def _nbytes(shape, dtype) -> int:
    n = 1
    for d in shape:
        n *= d
    size = _ITEMSIZE_CACHE.get(dtype)
    if size is None:
        size = getattr(dtype, "itemsize", None)
        if size is None:
            import numpy as np

            size = np.dtype(dtype).itemsize
        _ITEMSIZE_CACHE[dtype] = size
    return n * size


__all__ = ["Recorder", "OpEvent", "TransferEvent"]
