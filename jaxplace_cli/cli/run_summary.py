"""The lines ``jaxplace run`` ends with: what was recorded and the verdict (issue 26).

Made in the writer process when there is one (``store/writer_process.py`` ``call``): the audit
imports ~100 modules (numpy's analysis, the rules) and reads the store, and the writer process
has imported them while the script ran, on the other core. In the script's process that was
~20 ms of imports after the script's last line (issue 29); the lines are the same either way
(tests/test_run_summary.py).
"""
from __future__ import annotations

import os
from pathlib import Path

# Above this many ops + transfers the audit at a run's end would hold the shell for seconds
# (~0.5 s per 100,000 events here, bench P8): the summary says so instead.
VERDICT_MAX_EVENTS = 1_000_000
SMALL = 1024  # bytes: the counts line's "under 1 KiB" (report/run_lines.py)

# what the writer process imports while the script runs, for run_summary; the first summary
# then costs what a second one would (tests/test_run_summary.py: nothing more is imported)
PRELOAD = ["jaxplace_cli.cli.run_summary", "jaxplace_cli.analysis.audit", "jaxplace_cli.analysis.summary",
           "jaxplace_cli.report.verdict", "jaxplace_cli.report.run_lines"]


def run_summary(run_dir: str, quiet: bool, cwd: str | None = None) -> list[str]:
    """The summary of the run saved in ``run_dir`` (its ``run.json`` written), made where the
    script's process would make it: file names below ``cwd``, the script's working directory
    at its end (this may be another process)."""
    from jaxplace_cli.store.layout import EVENTS, read_manifest
    from jaxplace_cli.store.reader import trusting

    if cwd is not None and cwd != os.getcwd():
        os.chdir(cwd)
    with trusting(Path(run_dir) / EVENTS):  # this process wrote it and committed it just now
        return summary_lines_of(read_manifest(Path(run_dir)), run_dir, quiet, saved=True)


def summary_lines_of(manifest, run_dir, quiet: bool, saved: bool, verdict_wanted: bool = True) -> list[str]:
    """What was recorded and the verdict (``--quiet``: the verdict in one line, and only when
    it has an error or a warning). Nothing here may change the script's result: a run that
    cannot be read or audited ends with the lines that need no audit."""
    from jaxplace_cli.report.run_lines import empty_failure, quiet_line, summary_lines

    ev = manifest.events
    big = ev.ops + ev.transfers > VERDICT_MAX_EVENTS
    worth = verdict_wanted and saved and not big and not empty_failure(manifest) and (
        not quiet or manifest.status == "complete")
    verdict = _verdict(run_dir) if worth else None
    if quiet:
        line = quiet_line(manifest, verdict, run_dir) if verdict is not None else None
        return [line] if line else []
    lines = summary_lines(manifest, _kinds(run_dir, verdict), run_dir, saved, verdict)
    if big and saved:
        lines.insert(-1, f"jaxplace: {ev.ops + ev.transfers:,} events: the verdict is left to "
                         f"`jaxplace audit` (about 1 s per 200,000 events)")
    return lines


def _kinds(run_dir, verdict=None):
    """The counts line's numbers: the verdict's own (its summary scanned every transfer), else
    one aggregate query; None when the store cannot be read."""
    from jaxplace_cli.analysis.summary import kind_counts, transfer_kind_counts

    if verdict is not None and verdict.summary.min_bytes == SMALL:
        return kind_counts(verdict.summary)
    from jaxplace_cli.store.layout import EVENTS
    from jaxplace_cli.store.reader import StoreReader

    try:
        reader = StoreReader(Path(run_dir) / EVENTS)
        try:
            return transfer_kind_counts(reader.transfer_totals(SMALL))
        finally:
            reader.close()
    except Exception:
        return None


def _verdict(run_dir):
    """The run's audit as ``jaxplace audit`` makes it (without the suggestion: its solvers
    are not worth every run's end), or None when it cannot be made (a run killed mid-write,
    a Ctrl-C now): the script's exit code and output stay the script's."""
    from jaxplace_cli.analysis.audit import Audit

    try:
        return Audit(run_dir).result()
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - the verdict is an extra, never a failure
        return None
