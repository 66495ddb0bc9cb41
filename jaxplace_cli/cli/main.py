"""The ``jaxplace`` entry point: each command parses, calls library code, renders.

Usage errors (missing script, bad directory, bad option) print one line prefixed with
``jaxplace:`` and exit 2; jaxplace never shows its own traceback. Error text quotes input, so
it passes ``safe.plain``: one line, control characters shown, never sent.

``jaxplace run ...`` is parsed by argparse (cli/run.py), never typer: importing typer costs
~0.3 s here (it imports pydantic), wall time added to every recorded script. Every other
command goes through the typer application (app.py).
"""
from __future__ import annotations

import os
import sys
from typing import Optional

from jaxplace_cli.model.errors import EXIT_INTERNAL, EXIT_USAGE, JaxplaceError
from jaxplace_cli.model.safe import plain


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point: every error jaxplace reports is one line."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["run"]:
        from jaxplace_cli.cli.run import main as run_main

        _guarded(lambda: run_main(args[1:]))
    if args[:1] == ["launch"]:  # argparse too (it shares run's options): no typer start-up
        from jaxplace_cli.cli.launch import main as launch_main

        _guarded(lambda: launch_main(args[1:]))
    _guarded(lambda: _typer_main(args))


def _typer_main(args: list[str]) -> None:
    from jaxplace_cli.cli.app import app

    rv = app(args=args, standalone_mode=False, prog_name="jaxplace")
    # without standalone mode, typer returns the code of a typer.Exit instead of raising it
    sys.exit(rv if isinstance(rv, int) else 0)


def _say(line: str) -> None:
    """One line on stderr; none when stderr is closed (print(file=None) would use stdout)."""
    if sys.stderr is not None:
        print(line, file=sys.stderr)


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
        _say("jaxplace: interrupted")
        sys.exit(130)
    except JaxplaceError as exc:  # bad input or usage: one line, the error's own exit code
        _say(f"jaxplace: error: {plain(exc)}")
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        name = type(exc).__name__
        if name == "Exit" and hasattr(exc, "exit_code"):
            sys.exit(exc.exit_code)
        if name == "Abort":
            _say("jaxplace: aborted")
            sys.exit(130)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            lines = (exc.format_message() or name).splitlines()
            _say(f"jaxplace: error: {plain(lines[0] if lines else name)}")
            sys.exit(exc.exit_code if exc.exit_code not in (0, 1) else EXIT_USAGE)
        if os.environ.get("JAXPLACE_DEBUG"):
            raise
        _say(f"jaxplace: internal error: {name}: {plain(exc)} "
             "(set JAXPLACE_DEBUG=1 for the traceback, and please report it)")
        sys.exit(EXIT_INTERNAL)
