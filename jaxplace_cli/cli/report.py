"""`jaxplace report`: the run as one self-contained HTML page (timeline, matrix, findings).

Same analysis as ``jaxplace audit`` (``audit -o x.html`` writes the same page); this command
also shows a progress line on a terminal while a big run is read (a 1M-event run takes a few
seconds: auditing, then the timeline, then writing).
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from jaxplace_cli.model.errors import UsageError


def report(
    path: Path = typer.Argument(..., metavar="PATH",
                                help="A jaxplace run directory or launch job directory (a jax.profiler "
                                     "log dir or .xplane.pb: no timeline)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE",
                                          help="The HTML file to write (default: ./<run name>.html), atomically; "
                                               "an existing file only with --force."),
    force: bool = typer.Option(False, "--force", help="Replace the output file when it exists."),
    open_it: bool = typer.Option(False, "--open", help="Open the report in the default browser (on a terminal)."),
    min_bytes: str = typer.Option("1KiB", "--min-bytes", metavar="SIZE",
                                  help="Transfers smaller than this are counted apart."),
    top: int = typer.Option(20, "--top", min=1, metavar="N", help="How many transfer sites to list."),
    rule: Optional[List[str]] = typer.Option(None, "--rule", metavar="RULE", help="Only run this rule (repeatable)."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", metavar="RULE", help="Skip this rule (repeatable)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
) -> None:
    """Write the run as one self-contained HTML file: timeline, transfer matrix, findings.

    The page: a device timeline (one lane per device and the host; ops, transfer arrows, steps;
    zoom and pan), the transfer matrix, the verdict and findings linked to their moments on the
    timeline, top sites with their source lines, a per-step transfer chart and the run's
    metadata. No network: open it anywhere.

    Big runs are drawn with a level of detail (the page says which): every event of a
    window of steps, aggregates elsewhere. A launch job: the processes merged, one lane group
    per process with its verdict, and a table of the processes.
    """
    from jaxplace_cli.model.sizes import human_bytes

    out = output if output is not None else Path(f"{Path(path).resolve().name or 'run'}.html")
    if out.exists() and not force:  # said before the audit: no wait for a page that is not written
        raise UsageError(f"{out} exists; pass --force to replace it, or -o another file")
    size = write_report(path, out, min_bytes, top, rule, ignore, progress=not quiet and sys.stderr.isatty())
    opened = open_it and _open_in_browser(out)
    if not quiet:
        how = "opened in your browser" if opened else "open it in a browser"
        print(f"jaxplace: report written to {out} ({human_bytes(size)}); {how}", file=sys.stderr)


def _open_in_browser(out: Path) -> bool:
    """``--open``: the page in the default browser (``webbrowser``, which honours $BROWSER),
    only when a person is at a terminal: in CI or a pipe it would start a browser nobody sees."""
    if not (sys.stderr.isatty() and sys.stdout.isatty()):
        print("jaxplace: --open: not on a terminal, so no browser was started", file=sys.stderr)
        return False
    import webbrowser

    try:
        return bool(webbrowser.open(out.resolve().as_uri()))
    except webbrowser.Error:
        return False


BIG_RUN = 100_000  # ops + transfers: `audit` shows its progress line from this size on (~1 s here)


@contextmanager
def stages(enabled: bool):
    """``step(text)`` names the stage under way: a spinner, the stage and the elapsed time on
    stderr (a terminal only; transient: nothing is left behind)."""
    if not enabled:
        yield lambda text: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("jaxplace: {task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("opening", total=None)
        yield lambda text: bar.update(task, description=text)


def job_timeline(audit):
    """A job's processes' timelines as one, a lane group each (None when a process's run is
    too big to draw whole: the page then points at the per-process reports)."""
    from jaxplace_cli.analysis.timeline import DETAIL_MAX
    from jaxplace_cli.analysis.timeline_job import merge_timelines

    n = max(1, len(audit.result().distributed.processes))
    return merge_timelines(audit.timelines(detail_max=DETAIL_MAX // n))


def write_report(path: Path, output: Path, min_bytes: str = "1KiB", top: int = 20, rule=None, ignore=None,
                 progress: bool = False) -> int:
    """Audit ``path`` (a run, a trace or a job), build its timeline, write the page to
    ``output``; returns its size."""
    from jaxplace_cli.analysis.audit import Audit
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.cli.common import check_rules, parse_min_bytes
    from jaxplace_cli.report import write_atomic
    from jaxplace_cli.report.base import Options, renderer
    from jaxplace_cli.suggest.top import attach_suggestion

    cfg = RuleConfig(min_bytes=parse_min_bytes(min_bytes))
    check_rules(rule, ignore)
    with stages(progress) as stage:
        audit = Audit(path, cfg, select=rule, ignore=ignore, top_sites=top, suggest=attach_suggestion)
        stage({"run": "auditing the run", "job": "auditing the job's processes"}.get(audit.kind, "reading the trace"))
        result = audit.result()
        stage("building the timeline")
        timeline = audit.timeline() if audit.kind != "job" else job_timeline(audit)
        stage("writing the page")
        text = renderer("audit", "html").render(result, Options(timeline=timeline, sources=audit.sources()))
        write_atomic(output, text)
    return len(text.encode())
