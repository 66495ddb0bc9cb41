"""`jaxplace diff BASE NEW`: what changed in data movement between two runs (or a baseline)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

EPILOG = """\b
example:
  jaxplace diff baseline.json jaxplace-runs/train-1015 --fail-on-increase 10
"""


def diff(
    base: Path = typer.Argument(..., metavar="BASE",
                                help="Baseline: a run directory or a saved `audit --format json` file."),
    new: Path = typer.Argument(..., metavar="NEW", help="The run (or saved audit) to compare with it."),
    format: Optional[str] = typer.Option(None, "--format", "-f", metavar="FORMAT",
                                         help="text (default), json, markdown, github, junit, html."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE",
                                          help="Write the diff to FILE, atomically; its extension picks the format "
                                               "(.json .txt .md .xml .html) unless --format is given; .html: "
                                               "a page with both runs' per-step bars side by side."),
    min_bytes: Optional[str] = typer.Option(None, "--min-bytes", metavar="SIZE",
                                            help="Transfers smaller than this are not compared (default: a saved "
                                                 "baseline's own, else 1KiB)."),
    fail_on_increase: Optional[float] = typer.Option(None, "--fail-on-increase", min=0.0, metavar="PCT",
                                                     help="Exit 1 when any kind's bytes or count grew by more than PCT percent."),
) -> None:
    """Per-kind and per-site deltas, new sites and vanished sites."""
    from jaxplace_cli.analysis.diff import compare, increases_over, load_side
    from jaxplace_cli.cli.common import parse_min_bytes
    from jaxplace_cli.model.safe import plain
    from jaxplace_cli.report import pick_format, write_atomic
    from jaxplace_cli.report.base import Options, renderer

    fmt = pick_format("diff", format, output, "text")
    mb = parse_min_bytes(min_bytes) if min_bytes is not None else None
    # a saved baseline was counted from its own min_bytes: count the runs the same way
    saved = [load_side(p, 0) for p in (base, new) if Path(p).is_file()]
    if mb is None:
        mb = saved[0]["transfers"].get("min_bytes", 1024) if saved else 1024
    d = compare(load_side(base, mb), load_side(new, mb), str(base), str(new))
    failures = increases_over(d, fail_on_increase) if fail_on_increase is not None else []
    text = renderer("diff", fmt).render(d, Options(failures=tuple(failures)))
    if output is None:
        sys.stdout.write(text)
    else:
        write_atomic(output, text)
    for sentence in failures:
        print(f"jaxplace: diff: {plain(sentence)}", file=sys.stderr)
    if failures:
        raise typer.Exit(1)
