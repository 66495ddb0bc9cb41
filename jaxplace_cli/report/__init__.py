"""Renderers: an audit, a diff or a suggestion -> text. They never analyse; they only present
what the command hands them (``analysis.audit.Audit`` computed it).

Every format is one entry of the registry in ``report/base.py``. The format comes from
``--format`` or the output file's extension (``pick_format``), for every command that writes
a report file.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from jaxplace_cli.model.errors import JaxplaceError, UsageError

if TYPE_CHECKING:  # not at run time: `jaxplace run` imports report.run_lines before the script,
    # and the analysis package (numpy, 100 modules) is not needed there (issue 29)
    from jaxplace_cli.analysis import AuditResult

DEFAULT_WIDTH = 100  # text written to a pipe or a file, when COLUMNS does not say
MIN_WIDTH = 40


def __getattr__(name: str):
    """``FORMATS`` and ``EXTENSIONS``: the audit's formats and extensions, views of
    report/base.py's registry — made when asked for, so that ``jaxplace run`` importing
    ``report.run_lines`` before the script does not build the registry (~1.5 ms, issue 29)."""
    if name in ("FORMATS", "EXTENSIONS"):
        from jaxplace_cli.report.base import extensions, formats

        return formats("audit") if name == "FORMATS" else extensions("audit")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class OutputPathError(JaxplaceError):
    """``-o FILE`` with an extension no renderer is registered for (exit 2)."""


class OutputWriteError(JaxplaceError, OSError):
    """A report that could not be written: an ``OSError`` still (what callers of
    ``write_atomic`` catch), said by the CLI in one line (exit 2)."""


def format_for(path, table: dict) -> str:
    """The format ``-o PATH`` asks for by its extension; OutputPathError (one line) otherwise,
    never a silent fallback: ``-o report.html`` once wrote the box-drawing text report."""
    suffix = Path(path).suffix.lower()
    if suffix in table:
        return table[suffix]
    known = " ".join(sorted(table))
    what = f"extension {suffix!r}" if suffix else "no extension"
    raise OutputPathError(f"-o {Path(path).name}: {what} names no report format (use {known}, "
                          "or give --format)")


def pick_format(kind: str, fmt: str | None, output, default: str) -> str:
    """The format of a ``kind`` output: ``--format``, else ``-o``'s extension, else ``default``;
    a name the registry does not know is one line (exit 2)."""
    from jaxplace_cli.report.base import extensions, formats

    if fmt is None and output is not None:
        fmt = format_for(output, extensions(kind))
    fmt = fmt or default
    names = formats(kind)
    if fmt not in names:
        import difflib

        close = difflib.get_close_matches(fmt, list(names), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"--format must be one of {', '.join(names)}, not {fmt!r}{hint}")
    return fmt


def text_width() -> int:
    """Columns for text output: ``COLUMNS`` when set, else the terminal's, else 100 (a pipe or
    a file): piped text used to be fixed at 120 and ignore ``COLUMNS``."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return max(int(cols), MIN_WIDTH)
    return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, MIN_WIDTH)


def render_to_string(result: AuditResult, fmt: str, *, width: int | None = None,
                     max_findings: int | None = None, verbose: bool = False) -> str:
    """The audit ``result`` in format ``fmt`` (the registry's ``audit`` renderers)."""
    from jaxplace_cli.report.base import Options, renderer

    return renderer("audit", fmt).render(result, Options(width=width, max_findings=max_findings, verbose=verbose))


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file + rename: a failed write never leaves a partial report (and
    is one line, exit 2)."""
    try:
        _write_atomic(Path(path), text)
    except OSError as exc:
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent or "."))
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a report should follow the umask
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
