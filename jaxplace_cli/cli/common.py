"""Shared by the command modules: the one-line usage error (exit code 2).

No typer import here: ``jaxplace run`` parses its command line with argparse (cli/run.py) and
must not pay for importing it."""
from __future__ import annotations

import sys

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print one line saying what is wrong and exit (2 = usage error)."""
    from jaxplace_cli.model.safe import plain

    # messages quote input (paths, keys, values): one line, no control characters
    print(f"jaxplace: error: {plain(message)}", file=sys.stderr, flush=True)
    raise SystemExit(code)
