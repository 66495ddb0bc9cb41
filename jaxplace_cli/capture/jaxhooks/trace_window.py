"""The native ``jax.profiler`` trace that goes into a run directory, bounded in time.

A whole run under ``jax.profiler.trace`` costs ~x1.5 wall time and memory that grows without
bound (issue: performance), so by default the trace covers a *window* of ``seconds`` or
``max_ops`` dispatches, placed on the steady state: it opens after the first recorded dispatch
that compiled nothing (warm-up — tracing, compiling, a first call that may run for seconds — is
left out; never before the script runs: ``start_trace`` initialises JAX's backends, which would
break a script that calls ``jax.distributed.initialize` first). It closes at the dispatch that
reaches either limit, or, while one long dispatch runs (a jitted 100k-step ``fori_loop``), from
a watchdog thread at the deadline: issue 24 measured such a window at x9 time and 12.8 GiB.
A program that never reaches a steady state gets no trace (``state`` "skipped"). Where the
window was cut is ``cut`` in run.json (``ops``, ``seconds``, ``watchdog``, ``own trace``,
``end``), and the audit says so. ``full`` keeps it open until the script ends. jaxplace's own
hooks record every op and transfer regardless of the window.

If the user's script starts its own trace, jaxplace closes its window first (saving what it
has) so the user's ``start_trace`` succeeds, and says so in the manifest.
"""
from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

from jaxplace_cli.capture.jaxhooks.state import active

WINDOW = "window"
FULL = "full"
OFF = "off"
TRACE_MODES = (WINDOW, FULL, OFF)
# The window's defaults (``--trace-seconds``, ``--trace-ops``). Its cost is mostly stop_trace's
# export, ~0.8 ms per traced op of the P1 step (measured in one process, 7 alternations:
# 100 steps +80-120 ms, i.e. ~5-7 % of P1's 1,500-step loop, the "window costs ~10 % of the
# loop" of issue 18; 20 steps +12-17 ms). 25 ops keep it near 1 % and still sample a step.
TRACE_SECONDS = 1.0
TRACE_OPS = 25


class TraceWindow:
    def __init__(self, log_dir: Path, mode: str = WINDOW, seconds: float = 1.0, max_ops: int = 0):
        self.log_dir = Path(log_dir)
        self.mode = mode
        self.seconds = seconds
        # A window also closes after this many recorded dispatches (0: no limit). The cost of a
        # window is per traced event — ops run ~2x slower inside it, and stop_trace() spends
        # ~80 us per traced eager op exporting (0.7 s for 9,000 ops here) and holds them all
        # in memory until then — so an eager-heavy script must not fill a whole second.
        self.max_ops = max_ops
        self._ops = 0  # recorded dispatches inside the window (window mode)
        self.state = "pending" if mode != OFF else "off"  # pending | open | closed | off | failed
        self.note = ""
        self._deadline = 0.0
        self._annotation = None
        self._orig_start = None
        self.cut = ""  # why the window closed: ops | seconds | watchdog | own trace | end
        self._compiles = 0  # compiles seen at the last dispatch while pending (warm-up)
        self._lock = threading.Lock()  # close() from the dispatching thread or the watchdog
        self._watchdog = None

    @property
    def traced_ops(self) -> int:
        return self._ops

    def arm(self) -> None:
        """Start watching dispatches; the trace opens at the first one."""
        if self.mode == OFF:
            return
        from jaxplace_cli.capture.jaxhooks.compiles import COMPILES  # not at import: cli/run imports this before JAX

        self._compiles = COMPILES[0]
        active.on_dispatch = self._on_dispatch
        self._patch_user_start_trace()

    def _on_dispatch(self) -> None:
        if self.state == "pending":
            from jaxplace_cli.capture.jaxhooks.compiles import COMPILES  # not at import: cli/run imports this before JAX

            n = COMPILES[0]
            if n != self._compiles and self.mode == WINDOW:  # this dispatch compiled: warm-up
                self._compiles = n
                return
            self._open()
        elif self.state == "open" and self.mode == WINDOW:
            self._ops += 1
            if self.max_ops and self._ops >= self.max_ops:
                self.close(cut="ops")
            elif time.monotonic() >= self._deadline:
                self.close(cut="seconds")

    def _deadline_passed(self) -> None:
        """The watchdog: the deadline passed with the window still open, most likely inside
        one long dispatch that no later dispatch would end."""
        if self.state == "open":
            self.close(cut="watchdog")

    def _open(self) -> None:
        import jax

        try:
            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0  # per-Python-call events: thousands, and slow
            options.host_tracer_level = 1
            (self._orig_start or jax.profiler.start_trace)(str(self.log_dir), profiler_options=options)
        except Exception as exc:
            self.state = "failed"
            self.note = f"trace not captured: {type(exc).__name__}: {exc}"
            active.on_dispatch = None
            return
        self.state = "open"
        self._deadline = time.monotonic() + self.seconds
        active.tracing = True
        if active.rec is not None:
            active.rec.on_transfer = functools.partial(annotate_transfer, active.rec)
        if self.mode == FULL:
            active.on_dispatch = None
        else:
            self._watchdog = threading.Timer(self.seconds, self._deadline_passed)
            self._watchdog.daemon = True
            self._watchdog.start()

    def close(self, reason: str = "", cut: str = "end") -> None:
        active.on_dispatch = None
        if self._watchdog is not None and threading.current_thread() is not self._watchdog:
            self._watchdog.cancel()
        with self._lock:
            if self.state == "pending":
                self.state = "skipped"  # no steady state reached: said by the audit, not on stderr
                return
            if self.state != "open":
                return
            import jax

            active.tracing = False
            if active.rec is not None:
                active.rec.on_transfer = None
            self.cut = cut
            try:
                jax.profiler.stop_trace()
                self.state = "closed"
                if reason:
                    self.note = reason
            except Exception as exc:
                self.state = "failed"
                self.note = f"trace not saved: {type(exc).__name__}: {exc}"

    def _patch_user_start_trace(self) -> None:
        import jax
        from jax._src import profiler as _src_profiler

        from jaxplace_cli.capture.jaxhooks import _patch

        original = jax.profiler.start_trace
        self._orig_start = original

        @functools.wraps(original)
        def start_trace(*args, **kwargs):
            if self.state == "open":
                self.close("jaxplace's trace window was closed early because the script started its own trace",
                           cut="own trace")
            elif self.state == "pending":
                self.state = "closed"
                self.note = "no jaxplace trace: the script started its own trace first"
                active.on_dispatch = None
            return original(*args, **kwargs)

        _patch(jax.profiler, "start_trace", start_trace)
        _patch(_src_profiler, "start_trace", start_trace)  # used by jax.profiler.trace()

    def files(self) -> list[str]:
        root = self.log_dir / "plugins" / "profile"
        if not root.is_dir():
            return []
        return sorted(str(p.relative_to(self.log_dir)) for p in root.rglob("*.xplane.pb"))


ANNOTATE_MIN_BYTES = 1024  # scalar operands would cost a TraceAnnotation per op (bench: 30-70 us)


def annotate_transfer(rec, ev) -> None:
    """Write a transfer into the open trace as a TraceAnnotation (its kwargs become stats),
    so XProf/Perfetto users see jaxplace's facts on the timeline they already know. Transfers
    below 1 KiB are left out of the trace (they are all in events.sqlite)."""
    if ev[6] < ANNOTATE_MIN_BYTES:  # TransferEvent.bytes
        return
    try:
        from jax.profiler import TraceAnnotation

        from jaxplace_cli.model.events import TransferEvent

        ev = TransferEvent._make(ev)
        with TraceAnnotation(f"jaxplace.transfer.{ev.kind}", src=ev.src, dst=ev.dst,
                             bytes=ev.bytes, implicit=int(ev.implicit), blocking=int(ev.blocking),
                             api=ev.api, site=rec.site_text(ev.site), seq=ev.seq):
            pass
    except Exception:
        pass
