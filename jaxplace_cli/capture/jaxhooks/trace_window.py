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

Steady state (issue 26: a window that opened and closed inside parameter init showed XProf
"No step marker observed", all times 0.0 ms):

* **steps marked** (``jax.profiler.StepTraceAnnotation``): the window opens as the third marked
  step begins (the first two are warm-up, as the audit counts them) and, once a limit is
  reached, closes as the step in progress ends, so XProf sees whole steps. A window already
  open when the first step is marked (it opened in the set-up) is discarded, its files
  removed, and placed on the steps instead. A long step is still cut by the watchdog, at
  twice the deadline. ``steps`` in run.json is ``[first, last]``: the steps (numbered as the
  script numbers them: ``step_num``, else from 1) that began inside the window;
* **no steps marked**: the window opens after warm-up (the first dispatch that compiled
  nothing) and each dispatch that still compiles inside it (the training step's first call,
  after parameter init) starts its count again, so it holds ``max_ops`` dispatches (or
  ``seconds``) after the last compile; at most 8x ``max_ops`` dispatches and 4x ``seconds``
  in all. When a dispatch compiles soon after the window closed (within 8x ``max_ops``
  dispatches) and two dispatches that compile nothing follow it (a loop after a set-up longer
  than the window, not a final reduction and its read), the window is discarded and placed
  again there, once. ``steps`` is then null.

If the user's script starts its own trace, jaxplace closes its window first (saving what it
has) so the user's ``start_trace`` succeeds, and says so in the manifest.
"""
from __future__ import annotations

import functools
import operator
import shutil
import threading
import time
from pathlib import Path

from jaxplace_cli.capture.jaxhooks.state import active
from jaxplace_cli.capture.trace_modes import FULL, OFF, TRACE_OPS, WINDOW
from jaxplace_cli.store.writer import ServiceThread

WARMUP_STEPS = 2  # marked steps left out before the window opens (analysis/steps.py: warm-up)
EXTEND_OPS, EXTEND_SECONDS = 8, 4  # a window still compiling holds at most this many times its limits
# a closed window is placed again after a compile followed by this many dispatches that compiled
# nothing (a loop after a long set-up), not after one (a final reduction and its read)
REPLACE_AFTER = 2


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
        self._lock, self._opening = threading.Lock(), threading.Lock()  # close(): a dispatch or the watchdog; opening
        self._watchdog = None
        self._steady = 0  # dispatches since the window opened or last compiled (the limit's count)
        self._hard = 0.0  # no window outlives this (EXTEND_SECONDS x seconds after it opened)
        self._marked = 0  # StepTraceAnnotation steps begun so far (0: the script marks none)
        self._in_window: list[int] = []  # numbers of the steps that began inside the window
        self._due = False  # a limit was reached inside a marked step: close as it ends
        self._sessions: set[Path] = set()  # profile session dirs before the window opened
        self._reopened = False  # a window closed in the set-up was placed again (once at most)
        self._watch = 0  # dispatches still watched after such a close
        self._after: int | None = None  # dispatches without a compile since one compiled, so watched

    @property
    def steps(self) -> list[int] | None:
        """``[first, last]`` step numbers inside the window; None when no step was marked in it."""
        return [min(self._in_window), max(self._in_window)] if self._in_window else None

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
        try:
            self._patch_step_annotation()
        except Exception as exc:  # the window then opens after warm-up, as without marked steps
            self.note = f"steps not followed: {type(exc).__name__}: {exc}"

    def _on_dispatch(self) -> None:
        from jaxplace_cli.capture.jaxhooks.compiles import COMPILES  # not at import: cli/run imports this before JAX

        n = COMPILES[0]
        compiled = n != self._compiles
        self._compiles = n
        if self.state == "pending":
            if (compiled and self.mode == WINDOW) or (self._marked and self.mode == WINDOW):
                return  # warm-up; or steps are marked, and the window opens on a step
            self._open()
        elif self.state == "open" and self.mode == WINDOW:
            self._ops += 1
            self._steady += 1
            now = time.monotonic()
            if self.max_ops and self._ops >= EXTEND_OPS * self.max_ops:
                self.close(cut="ops")
            elif now >= self._hard:
                self.close(cut="seconds")
            elif compiled and not self._marked:  # still warming up: count again from here
                self._steady, self._deadline = 0, now + self.seconds
                self._restart_watchdog(min(self.seconds, self._hard - now))
            else:
                limit = ("ops" if self.max_ops and self._steady >= self.max_ops else
                         "seconds" if now >= self._deadline else "")
                if limit and self._marked:
                    self._due = limit  # close as the marked step in progress ends
                elif limit:
                    self.close(cut=limit)
                    if not self._reopened and self.state == "closed":  # was it the set-up?
                        self._watch = EXTEND_OPS * max(self.max_ops, TRACE_OPS)
                        active.on_dispatch = self._after_close

    def _after_close(self) -> None:
        """The few dispatches after a window closed by its limits, steps unmarked: one that
        compiles means the window held the set-up (parameter init longer than the window),
        not the loop. The window is then discarded and placed again, once."""
        from jaxplace_cli.capture.jaxhooks.compiles import COMPILES

        n = COMPILES[0]
        compiled, self._compiles = n != self._compiles, n
        self._watch -= 1
        if self.state != "closed" or self._marked:
            active.on_dispatch = None
        elif compiled:
            self._after = 0  # a new warm-up: is a steady state coming after it?
        elif self._after is not None:
            self._after += 1
            if self._after >= REPLACE_AFTER:  # it is: the closed window held the set-up only
                with self._opening:  # once, whichever dispatching threads get here together
                    if self.state == "closed" and not self._reopened:
                        self._reopened = True
                        self._remove_new_sessions()
                        self.state, self.cut, self._ops = "pending", "", 0
                        active.on_dispatch = self._on_dispatch
                        self._start()
                return
        if self._watch <= 0 and self.state == "closed":
            active.on_dispatch = None

    def step_begin(self, num) -> None:
        """A StepTraceAnnotation step is made (before its own trace event): the window opens on
        the third one, or closes before this one when it was due."""
        self._marked += 1
        try:
            number = operator.index(num)  # an int, numpy's too; None or text: counted from 1
        except TypeError:
            number = self._marked
        if self.mode != WINDOW:
            if self.state == "open":
                self._in_window.append(number)
            return
        if self.state == "open" and self._marked == 1:  # opened in the set-up: place it on the steps
            self._discard()
        elif self.state == "closed" and self._marked == 1 and self.cut in ("ops", "seconds") and not self._reopened:
            self._reopened = True  # closed in the set-up, before any step: place it on the steps
            self._remove_new_sessions()
            self.state, self.cut, self._ops = "pending", "", 0
            active.on_dispatch = self._on_dispatch
        if self.state == "open" and self._due:
            self.close(cut=self._due)
        elif self.state == "pending" and self._marked > WARMUP_STEPS:
            self._open()
        if self.state == "open":
            self._in_window.append(number)

    def step_end(self) -> None:
        """A marked step ended (after its own trace event): a window due closes here."""
        if self.state == "open" and self._due:
            self.close(cut=self._due)

    def _deadline_passed(self) -> None:
        """The watchdog: the deadline passed with the window still open, most likely inside
        one long dispatch that no later dispatch would end."""
        if self.state == "open":
            self.close(cut="watchdog")

    def _open(self) -> None:
        # once: threads dispatching together all saw "pending", each start_trace after the first failed
        if not self._opening.acquire(blocking=False):  # the window ("already started": 4 in 5 runs, 4 threads)
            return
        try:
            if self.state == "pending":
                self._start()
        finally:
            self._opening.release()

    def _start(self) -> None:
        import jax

        self._sessions = set(self._session_dirs())
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
        now = time.monotonic()
        self._deadline, self._hard, self._steady, self._due = now + self.seconds, now + EXTEND_SECONDS * self.seconds, 0, False
        active.tracing = True
        if active.rec is not None:
            active.rec.on_transfer = functools.partial(annotate_transfer, active.rec)
        if self.mode == FULL:
            active.on_dispatch = None
        else:
            self._restart_watchdog(self.seconds * (2 if self._marked else 1))

    def _restart_watchdog(self, seconds: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = _Watchdog(seconds, self._deadline_passed)
        self._watchdog.start()

    def _session_dirs(self) -> list[Path]:
        root = self.log_dir / "plugins" / "profile"
        return [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []

    def _discard(self) -> None:
        """Close the window without keeping it (it opened in the set-up, before the steps):
        its session's files are removed and the window waits for the third step."""
        self.close(cut="discarded")
        if self.state != "closed":
            return
        self._remove_new_sessions()
        self.state, self.cut, self._ops, self._in_window = "pending", "", 0, []
        active.on_dispatch = self._on_dispatch

    def _remove_new_sessions(self) -> None:
        """Remove the profile session(s) the discarded window wrote (none that were there before)."""
        for d in set(self._session_dirs()) - self._sessions:
            shutil.rmtree(d, ignore_errors=True)
        for d in (self.log_dir / "plugins" / "profile", self.log_dir / "plugins"):
            try:
                d.rmdir()  # only when empty: the run's own dirs stay
            except OSError:
                pass

    def close(self, reason: str = "", cut: str = "end") -> None:
        active.on_dispatch = None
        if self._watchdog is not None and threading.get_ident() != self._watchdog.ident:
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
            self._reopened = True  # the script traces itself: the window is never placed again
            if self.state == "closed" and active.on_dispatch == self._after_close:
                active.on_dispatch = None
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

    def _patch_step_annotation(self) -> None:
        """Tell the window where the script's marked steps begin and end (around the class
        the hooks already put there, which records the steps as markers)."""
        import jax

        from jaxplace_cli.capture.jaxhooks import _patch

        window, base = self, jax.profiler.StepTraceAnnotation

        class StepTraceAnnotation(base):
            def __init__(self, name: str, **kwargs):
                # here, not in __enter__: the annotation is live in the trace only when the
                # trace was open as it was made (measured: opened in __enter__, the window's
                # first step had no "train" event in the .xplane.pb)
                try:
                    window.step_begin(kwargs.get("step_num"))
                except Exception:  # the window never breaks the script's step
                    pass
                super().__init__(name, **kwargs)

            def __exit__(self, *exc):
                out = super().__exit__(*exc)
                try:
                    window.step_end()
                except Exception:
                    pass
                return out

        StepTraceAnnotation.__name__ = StepTraceAnnotation.__qualname__ = "StepTraceAnnotation"
        _patch(jax.profiler, "StepTraceAnnotation", StepTraceAnnotation)

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

        ev = TransferEvent._make(ev[:len(TransferEvent._fields)])  # a raw row ends with its stack
        with TraceAnnotation(f"jaxplace.transfer.{ev.kind}", src=ev.src, dst=ev.dst,
                             bytes=ev.bytes, implicit=int(ev.implicit), blocking=int(ev.blocking),
                             api=ev.api, site=rec.site_text(ev.site), seq=ev.seq):
            pass
    except Exception:
        pass


class _Watchdog(ServiceThread):
    """The window's deadline: ``function()`` after ``seconds`` unless cancelled first. Not a
    ``threading.Timer``: an unnamed thread takes a number from the script's own ``Thread-N``
    sequence (its threads were named Thread-2, -4 instead of -1, -2), and the script sees it
    in ``threading.enumerate()``; a ServiceThread it never sees."""

    def __init__(self, seconds: float, function):
        super().__init__(name="jaxplace-trace-watchdog")
        self._seconds, self._function = seconds, function
        self._cancelled = threading.Event()

    def run(self) -> None:
        if not self._cancelled.wait(self._seconds):
            self._function()

    def cancel(self) -> None:
        self._cancelled.set()
