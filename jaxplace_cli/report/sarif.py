"""SARIF 2.1.0: each finding (and budget breach) as a result with a physical location, so
code-scanning UIs show it on the line. URIs are relative to the working directory when the
file lies below it (what GitHub code scanning expects).

Every result gets a location: GitHub code scanning rejects the *whole* file when one result
has none ("locationFromSarifResult: expected at least one location", github/codeql-action
#1738), although SARIF allows it. Findings about the whole program (idle-device, imbalance)
and breaches without a site are anchored at the audited script, else at the run's manifest.

Paths in a run (sites, the manifest's cwd and argv) are input: only those below the working
directory of ``jaxplace audit`` become artifact URIs (a hostile manifest cannot point a code
scanning UI at ``file:///etc/passwd``); a result whose site lies elsewhere is anchored like one
without a site. Only the path the user audited may become a ``file://`` URI."""
from __future__ import annotations

import json
import os
import urllib.parse

from jaxplace_cli import __version__
from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.safe import plain

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _below_cwd(path: str) -> str | None:
    """``path`` relative to the working directory, or None when it lies outside it."""
    try:
        rel = os.path.relpath(os.path.abspath(path))
    except ValueError:  # another drive, a NUL byte
        return None
    if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return rel.replace(os.sep, "/")


def _uri(path: str, audited: bool = False) -> str | None:
    rel = _below_cwd(path)
    if rel is not None:
        return _quote(rel)
    if audited:  # the path the user named on the command line
        return "file://" + _quote(os.path.abspath(path))
    return None


def _quote(path: str) -> str:
    """A non-UTF-8 path (decoded by Python with surrogates) keeps its bytes; a lone surrogate
    from JSON, which no byte gave, is written as its escape."""
    try:
        return urllib.parse.quote(path, errors="surrogateescape")
    except UnicodeEncodeError:
        return urllib.parse.quote(path, errors="backslashreplace")


def _location(file: str, line: int, audited: bool = False) -> list:
    if not file or file == "?" or not isinstance(file, str):
        return []
    uri = _uri(file, audited)
    if uri is None:
        return []
    region = {"startLine": line} if isinstance(line, int) and line > 0 else {}
    loc = {"physicalLocation": {"artifactLocation": {"uri": uri}}}
    if region:
        loc["physicalLocation"]["region"] = region
    return [loc]


def _anchor(result: AuditResult) -> tuple[str, int]:
    """Where a result without a user line points: the script the run ran (when it lies below
    the working directory), else what was audited (the run's run.json, or the trace file or
    directory)."""
    m = result.manifest
    if m is not None and m.target.kind == "path" and m.argv:
        script = os.path.join(m.cwd, m.argv[0])
        if _below_cwd(script) is not None and os.path.isfile(script):
            return os.path.abspath(script), 1
    path = os.path.abspath(result.path)
    if result.source == "run" and os.path.isfile(os.path.join(path, "run.json")):
        return os.path.join(path, "run.json"), 1
    return path, 0


def render(result: AuditResult) -> str:
    anchor = _anchor(result)

    def where(file, line):
        return _location(file, line) or _location(*anchor, audited=True)

    rules = sorted({f.rule for f in result.findings}
                   | ({f"budget.{b.rule}" for b in result.budget.breaches} if result.budget else set()))
    results = []
    for f in result.findings:
        results.append({"ruleId": f.rule, "level": _LEVEL.get(f.severity, "note"),
                        "message": {"text": plain(f.message + (f" Fix: {f.fix}" if f.fix else ""))},
                        "locations": where(f.file, f.line)})
    if result.budget is not None:
        for b in result.budget.breaches:
            results.append({"ruleId": f"budget.{b.rule}", "level": "error",
                            "message": {"text": plain(b.message)}, "locations": where(b.file, b.line)})
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
