"""One error base class for everything jaxplace reports to a user.

Each subclass carries its exit code, so the entry point (``cli/main.py``) turns any of them
into one ``jaxplace: error: ...`` line and that code without knowing the command: 2 for bad
input or usage, 1 for a failed check (a budget), 3 is left to jaxplace's own bugs.
"""
from __future__ import annotations

EXIT_FAILED_CHECK = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class JaxplaceError(Exception):
    """A problem jaxplace explains in one line: bad input, a bad option, a failed check."""

    exit_code = EXIT_USAGE


class DataError(JaxplaceError):
    """A value in a run's store that jaxplace could not have written (a buffer id list that is
    not numbers, a negative duration): the store is damaged or hostile (exit code 2). Raised
    deep in an analysis, which does not know the file; ``analysis.run.analyse`` names it."""


class UsageError(JaxplaceError):
    """A bad option, argument or combination of them, or an output that cannot be written
    (exit code 2): what commands raise where they once printed and exited themselves."""
