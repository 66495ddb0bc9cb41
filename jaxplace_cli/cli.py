"""The ``jaxplace`` command line: each command parses, calls library code, renders.

Usage errors (missing script, bad directory, bad option) print one line prefixed with
``jaxplace:`` and exit 2; jaxplace never shows its own traceback. Nothing here imports JAX at
module level, so ``jaxplace run --devices N`` can configure JAX before it is first imported.
"""
from __future__ import annotations

import sys
from typing import Optional

import typer

from . import __version__
from .commands import audit, devices, diff, run, suggest
from .commands.common import EXIT_USAGE

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Profile and audit where a JAX program's ops run and which line moved which bytes.",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"jaxplace {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version_callback,
                                       is_eager=True, help="Print the version and exit.")) -> None:
    """Profile and audit where a JAX program's ops run and which line moved which bytes."""


RUN_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}
app.command("run", context_settings=RUN_CONTEXT)(run.run)
app.command("audit")(audit.audit)
app.command("devices")(devices.devices)
app.command("suggest")(suggest.suggest)
app.command("diff")(diff.diff)


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point: every error jaxplace reports is one line.

    Typer's exception classes moved between versions (click, then a vendored copy), so they
    are recognised by their public shape: ``exit_code`` and ``format_message``.
    """
    import os

    try:
        rv = app(args=argv, standalone_mode=False, prog_name="jaxplace")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        typer.echo("jaxplace: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        name = type(exc).__name__
        if name == "Exit" and hasattr(exc, "exit_code"):
            sys.exit(exc.exit_code)
        if name == "Abort":
            typer.echo("jaxplace: aborted", err=True)
            sys.exit(130)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            lines = (exc.format_message() or name).splitlines()
            typer.echo(f"jaxplace: error: {lines[0] if lines else name}", err=True)
            sys.exit(exc.exit_code if exc.exit_code not in (0, 1) else EXIT_USAGE)
        if os.environ.get("JAXPLACE_DEBUG"):
            raise
        typer.echo(f"jaxplace: internal error: {name}: {exc} "
                   "(set JAXPLACE_DEBUG=1 for the traceback, and please report it)", err=True)
        sys.exit(3)
    # without standalone mode, typer returns the code of a typer.Exit instead of raising it
    sys.exit(rv if isinstance(rv, int) else 0)
