"""`jaxplace audit`: report transfers, sites, ops per device and findings."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from .common import fail

FORMATS = ("rich", "text", "json")


def audit(
    path: Path = typer.Argument(..., help="A jaxplace run directory, a jax.profiler log dir, or a .xplane.pb file."),
    format: Optional[str] = typer.Option(None, "--format", "-f", help="rich (default on a TTY), text, or json."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file (format from its extension: .json, .txt)."),
    min_bytes: str = typer.Option("1KiB", "--min-bytes", help="Transfers smaller than this are counted apart (e.g. 0, 1KiB, \"1 MB\")."),
    top: int = typer.Option(20, "--top", min=1, help="How many transfer sites to list."),
    rule: Optional[List[str]] = typer.Option(None, "--rule", help="Only run these rules (repeatable)."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", help="Skip these rules (repeatable)."),
    loop_threshold: int = typer.Option(3, "--loop-threshold", min=2, help="Repeats at one line that count as 'in a loop'."),
) -> None:
    """Report devices, transfers per kind, top transfer sites, ops per device, and findings."""
    from ..analysis import audit_run
    from ..analysis.findings import RULES, RuleConfig
    from ..analysis.run import InputError, classify_input, open_run
    from ..sizes import parse_size

    fmt = format or _format_from_output(output)
    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    try:
        min_b = parse_size(min_bytes)
    except ValueError as exc:
        fail(f"--min-bytes: {exc}")
    for r in (rule or []) + (ignore or []):
        if r not in RULES:
            fail(f"unknown rule {r!r}; rules are: {', '.join(RULES)}")
    cfg = RuleConfig(min_bytes=min_b, loop_threshold=loop_threshold)
    try:
        kind = classify_input(path)
        if kind == "run":
            result = audit_run(open_run(path), cfg, rule, ignore, top_sites=top)
        else:
            from ..analysis.trace_audit import audit_trace

            result = audit_trace(path, cfg, top_sites=top)
    except InputError as exc:
        fail(str(exc))
    _emit(result, fmt, output)


def _format_from_output(output: Optional[Path]) -> str:
    if output is not None:
        return {".json": "json", ".txt": "text"}.get(output.suffix.lower(), "text")
    return "rich" if sys.stdout.isatty() else "text"


def _emit(result, fmt: str, output: Optional[Path]) -> None:
    from ..report import render_to_string

    text = render_to_string(result, fmt)
    if output is None:
        sys.stdout.write(text)
        return
    from ..report import write_atomic

    try:
        write_atomic(output, text)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")


