"""Renderers: AuditResult -> text. They never analyse; they only present.

The format comes from ``--format`` or the output file's extension.
"""
from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

from jaxplace_cli.analysis import AuditResult

FORMATS = ("rich", "text", "json", "markdown", "junit", "sarif", "github", "html")
EXTENSIONS = {".json": "json", ".txt": "text", ".md": "markdown", ".xml": "junit",
              ".sarif": "sarif", ".html": "html", ".htm": "html"}


def render_to_string(result: AuditResult, fmt: str) -> str:
    if fmt in ("json", "markdown", "junit", "sarif", "github", "html"):
        import importlib

        module = importlib.import_module(f".{'json_report' if fmt == 'json' else fmt}", __name__)
        return module.render(result)
    from rich.console import Console

    from jaxplace_cli.report.terminal import render

    buf = io.StringIO()
    rich = fmt == "rich"
    # emoji=False: a ':name:' in a path from the input stays text (markup is escaped by the
    # renderer, model/safe.py)
    console = Console(file=buf, force_terminal=rich, no_color=not rich, width=120 if not rich else None,
                      highlight=False, soft_wrap=not rich, emoji=False)
    render(result, console)
    return buf.getvalue()


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
