"""`jaxplace diff BASE NEW`: what changed in data movement between two runs (or a baseline)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from jaxplace_cli.cli.common import fail


def diff(
    base: Path = typer.Argument(..., help="Baseline: a run directory or a saved `audit --format json` file."),
    new: Path = typer.Argument(..., help="The run (or saved audit) to compare with it."),
    format: Optional[str] = typer.Option(None, "--format", "-f",
                                         help="text (default), json, markdown, github, junit."),
    output: Optional[Path] = typer.Option(None, "--output", "-o",
                                          help="Write the diff to this file, atomically (format from the extension: .json .txt .md .xml)."),
    min_bytes: Optional[str] = typer.Option(None, "--min-bytes",
                                            help="Transfers smaller than this are not compared (default: a saved "
                                                 "baseline's own, else 1KiB)."),
    fail_on_increase: Optional[float] = typer.Option(None, "--fail-on-increase", min=0.0,
                                                     help="Exit 1 when any kind's bytes or count grew by more than PCT percent."),
) -> None:
    """Per-kind and per-site deltas, new sites and vanished sites."""
    from jaxplace_cli.analysis.diff import DiffInputError, compare, increases_over, load_side, to_dict
    from jaxplace_cli.model.safe import plain
    from jaxplace_cli.model.sizes import parse_size
    from jaxplace_cli.report.diff_render import EXTENSIONS, FORMATS, RENDERERS

    fmt = format or (EXTENSIONS.get(output.suffix.lower(), "text") if output is not None else "text")
    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    try:
        mb = parse_size(min_bytes) if min_bytes is not None else None
    except ValueError as exc:
        fail(f"--min-bytes: {exc}")
    try:
        # a saved baseline was counted from its own min_bytes: count the runs the same way
        saved = [load_side(p, 0) for p in (base, new) if Path(p).is_file()]
        if mb is None:
            mb = saved[0]["transfers"].get("min_bytes", 1024) if saved else 1024
        d = compare(load_side(base, mb), load_side(new, mb), str(base), str(new))
    except DiffInputError as exc:
        fail(str(exc))
    failures = increases_over(d, fail_on_increase) if fail_on_increase is not None else []
    text = (json.dumps(to_dict(d), indent=2) + "\n") if fmt == "json" else RENDERERS[fmt](d, failures)
    if output is None:
        sys.stdout.write(text)
    else:
        from jaxplace_cli.report import write_atomic

        try:
            write_atomic(output, text)
        except OSError as exc:
            fail(f"cannot write {output}: {exc.strerror or exc}")
    for sentence in failures:
        print(f"jaxplace: diff: {plain(sentence)}", file=sys.stderr)
    if failures:
        raise typer.Exit(1)
