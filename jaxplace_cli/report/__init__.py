"""Renderers: AuditResult -> text. They never analyse; they only present.

The format comes from ``--format`` or the output file's extension (``format_for``): one table,
``EXTENSIONS``, for every command that writes a report file.
"""
from __future__ import annotations

import importlib
import io
import os
import shutil
import tempfile
from pathlib import Path

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.errors import JaxplaceError

FORMATS = ("rich", "text", "json", "markdown", "junit", "sarif", "github", "html")
EXTENSIONS = {".json": "json", ".txt": "text", ".md": "markdown", ".xml": "junit",
              ".sarif": "sarif", ".html": "html", ".htm": "html"}
MODULES = {"json": "json_report"}  # format -> module of report/ (default: the format's name)
DEFAULT_WIDTH = 100  # text written to a pipe or a file, when COLUMNS does not say
MIN_WIDTH = 40


class OutputPathError(JaxplaceError):
    """``-o FILE`` with an extension no renderer is registered for (exit 2)."""


def format_for(path, extensions: dict | None = None) -> str:
    """The format ``-o PATH`` asks for by its extension; OutputPathError (one line) otherwise,
    never a silent fallback: ``-o report.html`` once wrote the box-drawing text report."""
    table = EXTENSIONS if extensions is None else extensions
    suffix = Path(path).suffix.lower()
    if suffix in table:
        return table[suffix]
    known = " ".join(sorted(table))
    what = f"extension {suffix!r}" if suffix else "no extension"
    raise OutputPathError(f"-o {Path(path).name}: {what} names no report format (use {known}, "
                          "or give --format)")


def text_width() -> int:
    """Columns for text output: ``COLUMNS`` when set, else the terminal's, else 100 (a pipe or
    a file): piped text used to be fixed at 120 and ignore ``COLUMNS``."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return max(int(cols), MIN_WIDTH)
    return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, MIN_WIDTH)


def render_to_string(result: AuditResult, fmt: str, *, width: int | None = None,
                     max_findings: int | None = None, verbose: bool = False) -> str:
    """``fmt`` of ``result``. ``max_findings`` (sites per rule) and ``verbose`` shape the
    human-readable reports (text, rich, markdown); ``width`` the text ones."""
    from jaxplace_cli.report.terminal import DEFAULT_MAX_FINDINGS

    cap = DEFAULT_MAX_FINDINGS if max_findings is None else max_findings
    if fmt == "markdown":
        from jaxplace_cli.report.markdown import render as markdown

        return markdown(result, max_findings=cap, verbose=verbose)
    if fmt not in ("rich", "text"):
        module = importlib.import_module(f".{MODULES.get(fmt, fmt)}", __name__)
        return module.render(result)
    from rich.console import Console

    from jaxplace_cli.report.terminal import render

    buf = io.StringIO()
    rich = fmt == "rich"
    console = Console(file=buf, force_terminal=rich, no_color=not rich, width=width or text_width(),
                      highlight=False, soft_wrap=False, emoji=False, markup=False)
    render(result, console, max_findings=cap, verbose=verbose)
    text = buf.getvalue()
    # rich pads indented blocks to the full width; a text report keeps no trailing blanks
    return text if rich else "\n".join(line.rstrip() for line in text.split("\n"))


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file + rename: a failed write never leaves a partial report."""
    path = Path(path)
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
