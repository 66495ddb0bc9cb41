"""GitHub Actions workflow commands: ``::error file=F,line=L::message`` per finding/breach."""
from __future__ import annotations

import os

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.paths import below
from jaxplace_cli.model.safe import plain

_CMD = {"error": "error", "warning": "warning", "info": "notice"}


def _escape(text: str) -> str:
    """A workflow command's data: one line (``plain``: no control characters, so no escape
    sequence reaches the CI log and no line break starts a command of its own), ``%`` and
    line breaks encoded as the runner expects."""
    return plain(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def _line(kind: str, message: str, file: str, line: int) -> str:
    props = []
    if file and file != "?":
        props.append(f"file={_prop(below(file) if os.path.isabs(file) else file)}")
        if line:
            props.append(f"line={line}")
    head = f"::{kind} " + ",".join(props) if props else f"::{kind}"
    return f"{head}::{_escape(message)}"


def render(result: AuditResult) -> str:
    out = [_line(_CMD.get(f.severity, "notice"), f"{f.rule}: {f.message}", f.file, f.line)
           for f in result.findings]
    if result.budget is not None:
        out += [_line("error", f"budget: {b.message}", b.file, b.line) for b in result.budget.breaches]
    return "\n".join(out) + ("\n" if out else "")


def render_report(result: AuditResult, options) -> str:
    """The registry's entry point (report/base.py)."""
    return render(result)
