"""`jaxplace diff BASE NEW`: what changed in data movement between two runs (or a baseline)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .common import fail


def diff(
    base: Path = typer.Argument(..., help="Baseline: a run directory or a saved `audit --format json` file."),
    new: Path = typer.Argument(..., help="The run (or saved audit) to compare with it."),
    format: str = typer.Option("text", "--format", "-f", help="text or json."),
    min_bytes: str = typer.Option("1KiB", "--min-bytes", help="Transfers smaller than this are not compared."),
    fail_on_increase: Optional[float] = typer.Option(None, "--fail-on-increase", min=0.0,
                                                     help="Exit 1 when any kind's bytes or count grew by more than PCT percent."),
) -> None:
    """Per-kind and per-site deltas, new sites and vanished sites."""
    from ..diff import DiffInputError, compare, increases_over, load_side, to_dict
    from ..sizes import human_bytes, parse_size

    if format not in ("text", "json"):
        fail(f"--format must be text or json, not {format!r}")
    try:
        mb = parse_size(min_bytes)
        d = compare(load_side(base, mb), load_side(new, mb), str(base), str(new))
    except ValueError as exc:
        fail(f"--min-bytes: {exc}")
    except DiffInputError as exc:
        fail(str(exc))
    if format == "json":
        sys.stdout.write(json.dumps(to_dict(d), indent=2) + "\n")
    else:
        print(f"jaxplace diff  {base}  ->  {new}")
        for k in d.kinds:
            pct = "" if k.bytes_pct is None else (" (new)" if k.bytes_pct == float("inf") else f" ({k.bytes_pct:+.1f}%)")
            print(f"  {k.kind}: {k.base_count} -> {k.new_count} transfers, "
                  f"{human_bytes(k.base_bytes)} -> {human_bytes(k.new_bytes)}{pct}")
        changed = [s for s in d.sites if s.status != "same"]
        for s in changed:
            print(f"  [{s.status}] {s.key}: {s.base_count} -> {s.new_count} transfers, "
                  f"{human_bytes(s.base_bytes)} -> {human_bytes(s.new_bytes)}")
        if not changed:
            print("  no site changed")
    if fail_on_increase is not None:
        growth = increases_over(d, fail_on_increase)
        for sentence in growth:
            print(f"jaxplace: diff: {sentence}", file=sys.stderr)
        if growth:
            raise typer.Exit(1)
