"""The ``jaxplace`` entry point: each command parses, calls library code, renders.

Usage errors (missing script, bad directory, bad option) print one line prefixed with
``jaxplace:`` and exit 2; jaxplace never shows its own traceback.

``jaxplace run SCRIPT ...`` with plain options is parsed without typer (commands/run_argv.py):
importing typer and building its parameters costs ~0.3 s here (typer imports pydantic), and
that is wall time added to every recorded script — more than the whole overhead budget of a
short run. Everything else, including ``run --help`` and any ``run`` command line the small
parser is not sure about, goes through the typer application (app.py).
"""
from __future__ import annotations

import os
import sys
from typing import Optional

from .commands.common import EXIT_USAGE


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point: every error jaxplace reports is one line."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["run"] and not os.environ.get("JAXPLACE_TYPER_RUN"):
        from .commands.run_argv import parse_run_argv

        parsed = parse_run_argv(args[1:])
        if parsed is not None:
            from .commands.run_script import run_script

            _guarded(lambda: run_script(**parsed))
            sys.exit(0)
    _guarded(lambda: _typer_main(args))


def _typer_main(args: list[str]) -> None:
    from .app import app

    rv = app(args=args, standalone_mode=False, prog_name="jaxplace")
    # without standalone mode, typer returns the code of a typer.Exit instead of raising it
    sys.exit(rv if isinstance(rv, int) else 0)


def _guarded(fn) -> None:
    """Run a command; turn what escapes it into one line and an exit code.

    Typer's exception classes moved between versions (click, then a vendored copy), so they
    are recognised by their public shape: ``exit_code`` and ``format_message``.
    """
    try:
        fn()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("jaxplace: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        name = type(exc).__name__
        if name == "Exit" and hasattr(exc, "exit_code"):
            sys.exit(exc.exit_code)
        if name == "Abort":
            print("jaxplace: aborted", file=sys.stderr)
            sys.exit(130)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            lines = (exc.format_message() or name).splitlines()
            print(f"jaxplace: error: {lines[0] if lines else name}", file=sys.stderr)
            sys.exit(exc.exit_code if exc.exit_code not in (0, 1) else EXIT_USAGE)
        if os.environ.get("JAXPLACE_DEBUG"):
            raise
        print(f"jaxplace: internal error: {name}: {exc} "
              "(set JAXPLACE_DEBUG=1 for the traceback, and please report it)", file=sys.stderr)
        sys.exit(3)
