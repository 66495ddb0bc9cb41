"""SARIF 2.1.0: each finding (and budget breach) as a result with a physical location, so
code-scanning UIs show it on the line. URIs are relative to the working directory when the
file lies below it (what GitHub code scanning expects)."""
from __future__ import annotations

import json
import os

from .. import __version__
from ..analysis import AuditResult

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _uri(path: str) -> str:
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    except ValueError:
        pass
    return "file://" + path if path.startswith("/") else path


def _location(file: str, line: int) -> list:
    if not file or file == "?":
        return []
    region = {"startLine": line} if line and line > 0 else {}
    loc = {"physicalLocation": {"artifactLocation": {"uri": _uri(file)}}}
    if region:
        loc["physicalLocation"]["region"] = region
    return [loc]


def render(result: AuditResult) -> str:
    rules = sorted({f.rule for f in result.findings}
                   | ({f"budget.{b.rule}" for b in result.budget.breaches} if result.budget else set()))
    results = []
    for f in result.findings:
        results.append({"ruleId": f.rule, "level": _LEVEL.get(f.severity, "note"),
                        "message": {"text": f.message + (f" Fix: {f.fix}" if f.fix else "")},
                        "locations": _location(f.file, f.line)})
    if result.budget is not None:
        for b in result.budget.breaches:
            results.append({"ruleId": f"budget.{b.rule}", "level": "error",
                            "message": {"text": b.message}, "locations": _location(b.file, b.line)})
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "jaxplace", "version": __version__,
                                "informationUri": "https://github.com/jaxplace/jaxplace",
                                "rules": [{"id": r} for r in rules]}},
            "results": results,
        }],
    }
    return json.dumps(doc, indent=2) + "\n"
