"""The audit's word on the run's trace window (capture/jaxhooks/trace_window.py): where it was
cut, when that is news — a watchdog cut inside one long dispatch, or no window at all."""
from __future__ import annotations


def trace_window_notes(run) -> list[str]:
    t = run.manifest.trace
    if t is None:
        return []
    if t.state == "skipped":
        return ["trace window: not opened (every dispatch compiled; the window is placed on the "
                "steady state); the recording does not depend on it"]
    if t.cut == "watchdog":
        return [f"trace window: cut at its {t.seconds:g} s deadline while a dispatch ran "
                f"({t.traced_ops} dispatches traced); the trace covers only that part of it"]
    return []
