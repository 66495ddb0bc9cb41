"""The lines ``jaxplace run`` prints on stderr around the script: where the run goes, what was
recorded, and the verdict (issue 26: the run ends with it, as pyinstrument ends with its
result). Text only: the counts come from ``analysis.summary.transfer_kind_counts``, the verdict
from the audit (``analysis.audit.Audit``) the command hands over."""
from __future__ import annotations

import sys

from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.paths import below
from jaxplace_cli.model.safe import plain
from jaxplace_cli.model.severity import ERROR, SEVERITIES, WARNING
from jaxplace_cli.model.sizes import human_bytes

FINDINGS_SHOWN = 5  # error/warning lines after a run; the rest are counted (audit lists them)


def say(*lines: str, after_script: bool = False) -> None:
    """Print jaxplace's own lines on stderr — and nowhere when stderr is closed: python then
    has ``sys.stderr`` None, and ``print(file=None)`` would write them into the script's stdout.
    ``after_script``: the process's own stderr (``sys.__stderr__``), not the stream the script
    may have put in ``sys.stderr`` (its log file must not get jaxplace's summary). Written to
    the stream, not through ``builtins.print``, which the script may have replaced."""
    stream = sys.__stderr__ if after_script else sys.stderr
    if stream is None:
        return
    try:
        for line in lines:
            stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError, AttributeError):  # a closed or broken stderr: jaxplace's lines are not the script's
        pass


def start_line(target: str, run_dir, extras: list[str]) -> str:
    """``jaxplace: recording train.py into RUN (2 simulated CPU devices, policy rr)``."""
    return (f"jaxplace: recording {plain(target)} into {plain(run_dir)}"
            + (f" ({', '.join(plain(e) for e in extras)})" if extras else ""))


def misplaced_line(options, target: str) -> str:
    """``jaxplace: --policy rr --devices 4 came after train.py and went to the script; ...``"""
    return (f"jaxplace: {plain(' '.join(options))} came after {plain(target)} and went to the script; "
            "put jaxplace options before it")


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


def summary_lines(manifest, kinds: dict | None, run_dir, saved: bool = True, verdict=None) -> list[str]:
    """What was recorded, every warning the run's manifest holds, the verdict (``verdict``: the
    run's ``AuditResult``, None when it could not be audited) and where the run is."""
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
    if not saved:
        lines.append(f"jaxplace: the run in {where} is incomplete (its manifest could not be "
                     f"written); `jaxplace audit` will say what it can read")
        return lines
    if empty_failure(manifest):
        lines.append(empty_failure_line(manifest, run_dir))
        return lines
    if verdict is not None:
        lines += [f"jaxplace: {verdict_line(verdict)}", *finding_lines(verdict)]
    lines.append(f"jaxplace: run saved to {where}; details: jaxplace audit {where}; "
                 f"HTML: jaxplace report {where}")
    return lines


def empty_failure(manifest) -> bool:
    """The script failed (or was stopped) before any JAX work was recorded: a run directory
    with nothing in it, which is no run to audit (issue 26: `train.py --policy rr` ending in
    the script's own argparse error)."""
    ev = manifest.events
    return manifest.status != "complete" and not ev.ops and not ev.transfers


def empty_failure_line(manifest, run_dir) -> str:
    return (f"jaxplace: the script ended ({manifest.status}, exit {manifest.exit_code}) before any "
            f"JAX work was recorded: nothing to audit in {plain(run_dir)}")


def verdict_line(result) -> str:
    """The audit's first line (report/verdict.py), as ``jaxplace audit`` prints it."""
    from jaxplace_cli.report.verdict import verdict_parts

    return " · ".join(verdict_parts(result))


def finding_lines(result, shown: int = FINDINGS_SHOWN) -> list[str]:
    """One line per error or warning finding, worst first: ``jaxplace:   error
    train.py:25 pingpong: <what> (cost: 8× · 8.0 MiB)``; infos are left to ``audit``."""
    from jaxplace_cli.report.verdict import cost_text

    order = {s: i for i, s in enumerate(SEVERITIES)}
    worth = sorted((f for f in result.findings if f.severity in (ERROR, WARNING)),
                   key=lambda f: (order[f.severity], -f.bytes, -f.count, f.file, f.line, f.rule))
    lines = []
    for f in worth[:shown]:
        where = f"{plain(below(f.file))}:{f.line}" if f.file else "(whole program)"
        cost = cost_text(f)
        lines.append(f"jaxplace:   {f.severity} {where} {plain(f.rule)}: {plain(f.message)}"
                     + (f" (cost: {cost})" if cost else ""))
    if len(worth) > shown:
        lines.append(f"jaxplace:   ... and {len(worth) - shown} more (jaxplace audit lists them)")
    return lines


def quiet_line(manifest, result, run_dir) -> str | None:
    """``--quiet``: at most one line, and only after a script that completed, when the verdict
    has an error or a warning: a clean run stays silent, as ``-q`` always was, and a failed
    script's stderr ends with python's own last line (its traceback, ``sys.exit``'s text)."""
    if manifest.status != "complete" or not any(f.severity in (ERROR, WARNING) for f in result.findings):
        return None
    return f"jaxplace: {verdict_line(result)} (jaxplace audit {plain(run_dir)})"
