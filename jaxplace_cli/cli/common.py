"""Checks the command modules share; each raises ``UsageError`` (one line, exit 2) through
``cli/main.py``, the one place errors become output.

No typer import here: ``jaxplace run`` parses its command line with argparse (cli/run.py) and
must not pay for importing it."""
from __future__ import annotations

from jaxplace_cli.model.errors import UsageError


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'pingpong'?)`` for a near miss, else ''."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_min_bytes(text: str) -> int:
    """``--min-bytes SIZE`` in bytes."""
    from jaxplace_cli.model.sizes import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise UsageError(f"--min-bytes: {exc}") from None


def check_rules(rule, ignore) -> None:
    """Every ``--rule``/``--ignore`` names a rule (a run's or a job's)."""
    from jaxplace_cli.analysis.findings import RULES
    from jaxplace_cli.analysis.rules.distributed import JOB_RULES

    for r in (rule or []) + (ignore or []):
        if r not in RULES and r not in JOB_RULES:
            raise UsageError(f"unknown rule {r!r}{did_you_mean(r, [*RULES, *JOB_RULES])}; rules are: "
                             f"{', '.join([*RULES, *JOB_RULES])}")
