"""The lines ``jaxplace run`` prints on stderr around the script: where the run goes, and what
was recorded. Text only: the counts come from ``analysis.summary.transfer_kind_counts``."""
from __future__ import annotations

import sys

from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.safe import plain
from jaxplace_cli.model.sizes import human_bytes


def say(*lines: str) -> None:
    """Print jaxplace's own lines on stderr — and nowhere when stderr is closed: python then
    has ``sys.stderr`` None, and ``print(file=None)`` would write them into the script's stdout."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        for line in lines:
            print(line, file=stream)
        stream.flush()
    except (OSError, ValueError):  # a closed or broken stderr: jaxplace's lines are not the script's
        pass


def start_line(target: str, run_dir, extras: list[str]) -> str:
    """``jaxplace: recording train.py into RUN (2 simulated CPU devices, policy rr)``."""
    return (f"jaxplace: recording {plain(target)} into {plain(run_dir)}"
            + (f" ({', '.join(plain(e) for e in extras)})" if extras else ""))


def transfer_counts_text(kinds: dict | None, fallback_total: int) -> str:
    """``h2d 61 (960.1 KiB; 31 under 1 KiB), d2h 30 (120 B; 30 under 1 KiB), d2d 0``: every
    transfer is counted, as budgets count them (a 4-byte float(loss) is a d2h the budget's
    ``d2h.count_per_step`` sees); the audit's table keeps the small ones apart. ``kinds``:
    kind -> (count, bytes, small, unknown size), None when the store could not be read."""
    if kinds is None:
        return f"{fallback_total} transfers"
    parts = []
    for kind in TRANSFER_KINDS:
        count, nbytes, small, unknown = kinds.get(kind, (0, 0, 0, 0))
        notes = ([f"{small:,} under 1 KiB"] if small else []) + ([f"{unknown:,} size unknown"] if unknown else [])
        parts.append(f"{kind} {count:,}" + (f" ({human_bytes(nbytes)}{'; ' + ', '.join(notes) if notes else ''})"
                                            if count else ""))
    return ", ".join(parts)


def summary_lines(manifest, kinds: dict | None, run_dir, saved: bool = True) -> list[str]:
    """What was recorded, every warning the run's manifest holds, and what to do next."""
    m, ev = manifest, manifest.events
    lines = [f"jaxplace: {m.status} (exit {m.exit_code}): recorded {ev.ops:,} ops, "
             f"transfers: {transfer_counts_text(kinds, ev.transfers)}"]
    if ev.lost_rows:
        lines.append(f"jaxplace: warning: {ev.lost_rows} events were lost: {plain(ev.write_error)}")
    if ev.backpressure_s >= 0.1:  # under that, not worth a line (run.json has every wait)
        lines.append(f"jaxplace: the script waited {ev.backpressure_s:.1f} s in all for the event writer "
                     f"({ev.backpressure_waits:,} times): events came faster than they could be stored")
    lines += [f"jaxplace: warning: {plain(w)}" for w in m.warnings]
    lines += [f"jaxplace: warning: hook unavailable on this JAX version (not recorded): {plain(h)}"
              for h in m.hooks.unavailable]
    if m.trace is not None and m.trace.note:
        lines.append(f"jaxplace: {plain(m.trace.note)}")
    where = plain(run_dir)
    if saved:
        lines.append(f"jaxplace: run saved to {where}; audit it with: jaxplace audit {where}; "
                     f"see it: jaxplace report {where} -o report.html")
    else:
        lines.append(f"jaxplace: the run in {where} is incomplete (its manifest could not be "
                     f"written); `jaxplace audit` will say what it can read")
    return lines
