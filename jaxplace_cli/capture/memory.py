"""Device memory tracking (issue 27): when each buffer jaxplace records is released.

The allocation is the buffer's existing row (``BufferEvent``: seq, device, bytes, site); this
module adds the end of its life (``FreeEvent``) and, for an array over several devices, what
each device holds (``ShardEvent``). The mechanism is a *watch* in each tracked array's
``__dict__`` (beside its buffer id): the array's death releases its ``__dict__``, and the
watch's end appends the free. Nothing else holds a watch, so no lifetime is extended
(tests/test_memory_capture.py compares ``jax.live_arrays()`` with and without jaxplace), and
an array freed as cyclic garbage is seen too (the collector clears its ``__dict__``). It costs
one small object and one dict store per new buffer (capture/_native.c ``Watch``; it replaced a
weakref with a callback and two dict stores: the measured gain is in docs/memory.md, "Cost").
An array released without dying —
``Array.delete()``, a buffer donated to a jit call — is reported by the hooks (``released``:
capture/jaxhooks/memory.py), which end its watch so it is freed once.

What Python-level tracking cannot see: XLA's temporaries inside a compiled program, and
arrays made before the recording started until an op first uses them (their row's seq is the
first sight). Where ``device.memory_stats()`` exists (GPU/TPU; CPU returns None) the device's
own ``bytes_in_use``/``peak_bytes_in_use`` are sampled at the end of recording beside it.
"""
from __future__ import annotations

import json
import re
import sys
from collections import deque

from jaxplace_cli.model.events import MARKER_MEMORY_STATS, MARKER_OOM, device_label
from jaxplace_cli.model.raw import FREE_HOW
from jaxplace_cli.model.raw import FREE_ROW as _ROW
from jaxplace_cli.model.sizes import human_bytes

BUF_ATTR = "_jaxplace_buf"  # capture/recorder.py's, repeated: the recorder imports this module
WATCH_ATTR = "_jaxplace_watch"  # an array's watch, in its __dict__ beside BUF_ATTR


class Tracker:
    """The live buffers of one recorder: ``track`` on a new buffer, frees appended as rows."""

    def __init__(self, seqs, maxlen: int | None = None):
        # (buf, seq, how code) as three native int64 a free (model/raw.py): no object the cycle
        # collector tracks (a tuple per free brings JAX's gc callback closer, bench P2)
        self.frees = bytearray()
        self.shards: deque = deque(maxlen=maxlen)  # (buf, device, bytes)
        self._seqs = seqs  # the recorder's sequence, peeked: a free is ordered among ops and transfers
        # a bounded recorder (``maxlen``: no writer reads it, device_placement outside a run)
        # does not track: its frees would only pile up
        self.on = maxlen is None
        self.no_stats = False  # the backend answered no memory_stats() once: not asked again
        from jaxplace_cli.capture import native

        mod = native.module()  # the watches in C where the extension is built (capture/_native.c)
        self.core = (mod.WatchCore if mod is not None else _Core)(self.frees, seqs, WATCH_ATTR)
        self.core.on = self.on
        self.peek = mod.peek_seq if mod is not None else peek_seq
        # what the C hot path reads to inline ``track`` (capture/_native.c, track_): None = off
        self.state = self.core if self.on else None

    def track(self, arr, b: int, site: int, device: str) -> None:
        """Follow ``arr`` (buffer id ``b``, made at ``site`` on ``device``) until it is freed."""
        if not self.on:
            return
        d = getattr(arr, "__dict__", None)
        if type(d) is not dict:  # a foreign Array type without one: not tracked
            return
        d[WATCH_ATTR] = self.core.watch(b, site)
        if "," in device:
            self._add_shards(arr, b)

    def released(self, arr, how: str, seq: int | None = None) -> None:
        """``arr`` gave its memory back while the object lives on (``delete``, ``donated``);
        ``seq``: the donating call's own (None: the next event's)."""
        d = getattr(arr, "__dict__", None)
        w = d.get(WATCH_ATTR) if d is not None else None
        if w is not None and w.core is self.core:
            w.release(FREE_HOW.index(how), -1 if seq is None else seq)

    def retarget(self, old, new) -> None:
        """``new`` holds ``old``'s buffer now (a placement re-made the Array over the same
        memory, capture/jaxhooks/engine.py): the old object's end is no free, the new one's is."""
        od, nd = getattr(old, "__dict__", None), getattr(new, "__dict__", None)
        w = od.pop(WATCH_ATTR, None) if od is not None else None
        if w is None:
            return
        if self.on and type(nd) is dict:
            nd[WATCH_ATTR] = w
        else:  # nowhere to follow it: untracked from here, its end is no free either
            w.forget()

    def _add_shards(self, arr, b: int) -> None:
        """Each device of a multi-device array holds one shard of ``shard_shape``."""
        try:
            sh = arr.sharding
            n = 1
            for dim in sh.shard_shape(arr.shape):
                n *= dim
            per = n * arr.dtype.itemsize
            for dev in sorted(sh.addressable_devices, key=lambda d: d.id):
                self.shards.append((b, device_label(dev), per))
        except Exception:
            pass  # an exotic sharding: the buffer row's total stays, split evenly by the analysis

    def live(self):
        """(buf, site, array) of every tracked array still alive and not deleted: JAX's own
        list of live arrays (``jax.live_arrays``: the default backend's and the CPU's), those
        with a live watch of this tracker."""
        jax = sys.modules.get("jax")
        if jax is None or not self.on:
            return
        for platform in _platforms(jax):
            try:
                arrays = jax.live_arrays(platform)
            except Exception:
                continue
            for arr in arrays:
                d = getattr(arr, "__dict__", None)
                w = d.get(WATCH_ATTR) if d is not None else None
                if w is None or w.core is not self.core or not w.live:
                    continue
                try:
                    if arr.is_deleted():
                        continue
                except Exception:
                    continue
                yield w.b, w.site, arr

    def stop(self) -> None:
        """Recording ended: what is live now is the run's end state; no watch of this tracker
        appends a free after this (teardown frees are not rows)."""
        self.on = False
        self.core.on = False
        self.state = None

    def take(self) -> tuple[bytes, list]:
        """(frees packed, shard rows): ``model.raw.frees_rows`` makes the rows, in the writer."""
        self.core.flush()
        frees = self.frees
        n = len(frees)
        n -= n % _ROW.size  # whole rows (each append is one C call under the GIL)
        out = bytes(frees[:n])
        del frees[:n]  # a free appended meanwhile stays for the next take
        return out, _pop_all(self.shards)


def _platforms(jax) -> list[str]:
    """The default backend's platform and the CPU (``jax.live_arrays`` takes one at a time;
    the set keeps the CPU once where it is the default)."""
    try:
        return sorted({d.platform for d in jax.devices()} | {"cpu"})
    except Exception:
        return ["cpu"]


class _Core:
    """capture/_native.c's ``WatchCore`` where the extension is not built."""

    def __init__(self, frees: bytearray, seqs, attr: str):
        self.frees, self.seqs, self.attr, self.on = frees, seqs, attr, True

    def watch(self, b: int, site: int):
        return _Watch(self, b, site)

    def flush(self) -> None:
        """The C core keeps its frees until asked; this one appends them as they come."""

    def append(self, b: int, seq: int, how: int) -> None:
        if seq < 0:
            seq = peek_seq(self.seqs)
        if seq >= 0:
            self.frees += _ROW.pack(b, seq, how)


class _Watch:
    """capture/_native.c's ``Watch``: appends its buffer's free when the array holding it dies."""

    __slots__ = ("core", "b", "site", "armed")

    def __init__(self, core: _Core, b: int, site: int):
        self.core, self.b, self.site, self.armed = core, b, site, True

    @property
    def live(self) -> bool:
        return self.armed and self.core.on

    def forget(self) -> None:
        self.armed = False

    def release(self, how: int, seq: int) -> bool:
        if not self.live:
            return False
        self.armed = False
        self.core.append(self.b, seq, how)
        return True

    def __del__(self):
        # runs wherever the array's last reference went (any thread, inside a collection): no raise
        try:
            if self.armed and self.core.on:
                self.core.append(self.b, -1, 0)
        except Exception:
            pass


def peek_seq(seqs) -> int:
    """The seq ``next(seqs)`` would give, not drawn (``count(N)``): a free is no event of its
    own, it happened before the event that draws this seq (capture/_native.c, count_peek)."""
    try:
        return int(repr(seqs)[6:-1])
    except Exception:
        return -1


def _pop_all(dq: deque) -> list:
    pop = dq.popleft
    return [pop() for _ in range(len(dq))]


# -- device statistics ----------------------------------------------------------------------------

def memory_stats_value() -> str:
    """JSON ``{device: [bytes_in_use, peak_bytes_in_use]}`` of the local devices, "" where the
    backend has no ``memory_stats()`` (CPU returns None; untested there, must never raise) or
    none was started (the script used no device: asking would start one)."""
    from jaxplace_cli.capture.jaxhooks.devices import backends_up

    if not backends_up():  # also False where JAX was never imported
        return ""
    jax = sys.modules["jax"]
    out = {}
    try:
        for dev in jax.local_devices():
            stats = dev.memory_stats()
            if stats and "bytes_in_use" in stats:
                out[device_label(dev)] = [int(stats["bytes_in_use"]),
                                          int(stats.get("peak_bytes_in_use", stats["bytes_in_use"]))]
    except Exception:
        return ""
    return json.dumps(out, sort_keys=True) if out else ""


def sample_memory_stats(rec) -> None:
    value = memory_stats_value()
    if value:
        rec.marker(MARKER_MEMORY_STATS, value)


def end_recording(rec, sample: bool = True) -> None:
    """The recording ends: sample the devices' own memory statistics (where they exist) and
    stop following buffers, so what is live now is the run's end state. ``sample=False`` from
    a fatal signal's handler: asking JAX for its devices there waited forever when the signal
    had interrupted JAX's backend start, which holds the same lock (a SIGTERM during the
    script's first op hung instead of ending the run)."""
    if rec.memory.on:
        try:
            if sample:
                sample_memory_stats(rec)
        finally:
            rec.memory.stop()
            rec.mem_state = None


def sample_step_stats(rec) -> None:
    """A step ends (``jax.profiler.StepTraceAnnotation``'s exit, before its ``step-end``
    marker, so the sample belongs to the step): one ``memory_stats()`` call per device. A
    backend without them (CPU returns None) is asked once per recording and never again, and
    writes nothing: a CPU run's rows and seqs are what they were without sampling."""
    try:  # a recording failure never becomes the user's error
        tracker = getattr(rec, "memory", None)
        if tracker is None or not tracker.on or tracker.no_stats:
            return
        value = memory_stats_value()
        if value:
            rec.marker(MARKER_MEMORY_STATS, value)
        else:
            tracker.no_stats = True
    except Exception:
        pass


# -- failed allocations -------------------------------------------------------------------------

_OOM_RE = re.compile(r"RESOURCE_EXHAUSTED|Out of memory|out of memory")
_BYTES_RE = re.compile(r"allocat\w*\s+(\d+)\s*bytes|(\d+)\s*bytes")
TOP_N = 10


def is_oom(exc: BaseException) -> bool:
    try:
        return bool(_OOM_RE.search(str(exc)))
    except Exception:
        return False


def requested_bytes(text: str) -> int:
    """The size XLA failed to allocate, from its message ("Out of memory allocating N bytes");
    -1 when the text does not say."""
    m = _BYTES_RE.search(text)
    return int(m.group(1) or m.group(2)) if m else -1


def on_oom(rec, devices: list[str], kwargs: dict, site: int, exc: BaseException) -> None:
    """Record a failed allocation (a marker) and say on stderr what filled the device (jax#9530):
    the requested bytes, live bytes per device, the largest live buffers with their lines."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    device = devices[0] if devices else _default_device(kwargs)
    nbytes = requested_bytes(text)
    rec.marker(MARKER_OOM, json.dumps({"site": site, "device": device, "bytes": nbytes,
                                       "error": text[:500]}))
    tracker = getattr(rec, "memory", None)
    if tracker is None:
        return
    per_device: dict = {}
    top = []
    for b, bsite, arr in tracker.live():
        try:
            sh = arr.sharding
            devs = sorted(sh.addressable_devices, key=lambda d: d.id)
            n = 1
            for dim in sh.shard_shape(arr.shape):
                n *= dim
            per = n * arr.dtype.itemsize
        except Exception:
            continue
        for d in devs:
            lab = device_label(d)
            per_device[lab] = per_device.get(lab, 0) + per
        top.append((per * len(devs), b, bsite, ",".join(device_label(d) for d in devs),
                    f"{arr.dtype}[{','.join(map(str, arr.shape))}]"))
    top.sort(key=lambda t: (-t[0], t[1]))
    where = rec.site_text(site) or "?"
    lines = [f"jaxplace: out of memory at {where} on {device}: requested "
             f"{human_bytes(nbytes) if nbytes >= 0 else 'an unknown size'}"]
    live = ", ".join(f"{d} {human_bytes(n)}" for d, n in sorted(per_device.items())) or "none tracked"
    lines.append(f"  live jax.Arrays per device: {live}")
    if top:
        lines.append(f"  largest live buffers ({min(TOP_N, len(top))} of {len(top)}):")
        for nb, _b, bsite, devs, desc in top[:TOP_N]:
            lines.append(f"    {human_bytes(nb):>10}  {devs:<8} {rec.site_text(bsite) or '?'}  {desc}")
    try:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _default_device(kwargs: dict) -> str:
    dev = kwargs.get("device") if kwargs else None
    try:
        if dev is not None and hasattr(dev, "platform"):
            return device_label(dev)
        jax = sys.modules.get("jax")
        if jax is not None:
            default = jax.config.jax_default_device
            if default is not None and hasattr(default, "platform"):
                return device_label(default)
            return device_label(jax.devices()[0])
    except Exception:
        pass
    return "?"
