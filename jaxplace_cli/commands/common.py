"""Shared by the command modules: the one-line usage error (exit code 2)."""
from __future__ import annotations

import typer

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print one line saying what is wrong and exit (2 = usage error)."""
    typer.echo(f"jaxplace: error: {message}", err=True)
    raise typer.Exit(code)
