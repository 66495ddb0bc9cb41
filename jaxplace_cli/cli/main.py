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
import re
import sys
from typing import Optional

from jaxplace_cli.model.errors import EXIT_INTERNAL, EXIT_USAGE, JaxplaceError
from jaxplace_cli.model.safe import plain

# What jaxplace imports itself (pyproject.toml's dependencies, typer's own): missing, they mean
# this Python is not the one jaxplace was installed into (`python3 -m jaxplace_cli` from the
# checkout, outside .venv), not a bug of jaxplace's.
DEPENDENCIES = {"jax", "jaxlib", "numpy", "typer", "click", "rich", "scipy", "shellingham", "pydantic"}


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point: every error jaxplace reports is one line."""
    args = sys.argv[1:] if argv is None else list(argv)
    if argv is None:  # the console script: its frame is under the script's, never the user's code
        from jaxplace_cli.capture.frames import note_launcher

        note_launcher(sys._getframe())
    if args[:1] == ["run"]:
        from jaxplace_cli.cli.run import main as run_main

        _guarded(lambda: run_main(args[1:]))
    if args[:1] == ["launch"]:  # argparse too (it shares run's options): no typer start-up
        from jaxplace_cli.cli.launch import main as launch_main

        _guarded(lambda: launch_main(args[1:]))
    _guarded(lambda: _typer_main(args), args)


def _typer_main(args: list[str]) -> None:
    from jaxplace_cli.cli.app import app

    rv = app(args=args, standalone_mode=False, prog_name="jaxplace")
    # without standalone mode, typer returns the code of a typer.Exit instead of raising it
    sys.exit(rv if isinstance(rv, int) else 0)


def _say(line: str) -> None:
    """One line on stderr; none when stderr is closed (print(file=None) would use stdout)."""
    if sys.stderr is not None:
        try:  # not builtins.print: a script jaxplace ran may have replaced it
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _guarded(fn, args: Optional[list[str]] = None) -> None:
    """Run a command; turn what escapes it into one line and an exit code.

    Typer's exception classes moved between versions (click, then a vendored copy), so they
    are recognised by their public shape: ``exit_code`` and ``format_message``.
    """
    args = args or []
    try:
        fn()
    except SystemExit:
        raise
    except ModuleNotFoundError as exc:
        if exc.name not in DEPENDENCIES:  # a package itself, not a module inside one (a private submodule of jax)
            _internal(exc)
        _say(f"jaxplace: error: this Python ({plain(sys.executable)}) lacks {plain(exc.name)}, which "
             "jaxplace needs: use the one jaxplace was installed into (after `make install`: "
             "source .venv/bin/activate, or .venv/bin/jaxplace), or install it here: pip install . "
             "in the jaxplace checkout")
        sys.exit(EXIT_USAGE)
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
        if name == "NoArgsIsHelpError" and getattr(exc, "ctx", None) is not None:
            _say(exc.ctx.get_help())  # `jaxplace` alone: the commands, exit 2 (as memray does)
            sys.exit(EXIT_USAGE)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            lines = (exc.format_message() or name).splitlines()
            _say(f"jaxplace: error: {plain(in_our_words(lines[0] if lines else name, args))}")
            sys.exit(exc.exit_code if exc.exit_code not in (0, 1) else EXIT_USAGE)
        _internal(exc)


def _internal(exc: BaseException):
    """jaxplace's own bug: one line, exit 3 (the traceback with JAXPLACE_DEBUG=1)."""
    if os.environ.get("JAXPLACE_DEBUG"):
        raise exc
    _say(f"jaxplace: internal error: {type(exc).__name__}: {plain(exc)} "
         "(set JAXPLACE_DEBUG=1 for the traceback, and please report it)")
    sys.exit(EXIT_INTERNAL)


# typer (>= 0.16) checks an option's range and type with pydantic and says it in pydantic's
# words; these say it in jaxplace's, with the value given.
_PYDANTIC = [
    (re.compile(r"Input should be greater than or equal to (\S+)$"), "must be {0} or more"),
    (re.compile(r"Input should be greater than (\S+)$"), "must be more than {0}"),
    (re.compile(r"Input should be less than or equal to (\S+)$"), "must be {0} or less"),
    (re.compile(r"Input should be less than (\S+)$"), "must be less than {0}"),
    (re.compile(r"Input should be a valid integer"), "must be a whole number"),
    (re.compile(r"Input should be a valid number"), "must be a number"),
]


def in_our_words(message: str, args: list[str]) -> str:
    """``Invalid value for '--top': Input should be greater than or equal to 1`` becomes
    ``--top must be 1 or more, not 0``; any other message is kept."""
    m = re.match(r"Invalid value for '([^']+)': (.*)$", message)
    if not m:
        return message
    option, said = m.groups()
    for pattern, words in _PYDANTIC:
        hit = pattern.search(said)
        if hit:
            value = _value_of(option, args)
            shown = value if value is not None and re.fullmatch(r"[-+]?[\d.eE+-]+", value) else repr(value)
            return f"{option} {words.format(*hit.groups())}" + (f", not {shown}" if value is not None else "")
    return message


def _value_of(option: str, args: list[str]) -> Optional[str]:
    """The value the command line gave ``option`` (its last one), if it can be seen."""
    names = [n.strip() for n in option.split("/")]
    value = None
    for i, tok in enumerate(args):
        for n in names:
            if tok == n and i + 1 < len(args):
                value = args[i + 1]
            elif tok.startswith(n + "=") and n.startswith("--"):
                value = tok[len(n) + 1:]
    return value
