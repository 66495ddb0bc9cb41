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
without a site. Only the path the user audited may become a ``file://`` URI.

Each rule carries its metadata (short and full description, a help URI into docs/rules.md or
docs/budgets.md) so code-scanning UIs can explain it; each result a ``partialFingerprints``
entry computed from what does not change between runs of the same code (rule, file, line, the
devices involved — not the counts), so an alert keeps its identity across runs. Results are
capped (``MAX_RESULTS``; budget breaches first, then findings worst first), and the run says how
many were left out."""
from __future__ import annotations

import hashlib
import json
import os
import urllib.parse

from jaxplace_cli import __version__
from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.findings import RULE_DOCS
from jaxplace_cli.model import safe
from jaxplace_cli.model.severity import SEVERITIES

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
HOME = "https://github.com/jaxplace/jaxplace"
DOCS = f"{HOME}/blob/main/docs"
MAX_RESULTS = 1000  # GitHub shows at most 5,000 alerts per upload; a run needs far fewer


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


def _rule(rule_id: str) -> dict:
    if rule_id.startswith("budget."):
        limit = rule_id[len("budget."):]
        short = f"Budget limit {limit} exceeded"
        full = (f"The run exceeded the budget's {limit} limit (a budget file or an audit --max-* / "
                "--fail-on flag); the message names the worst step or site.")
        uri = f"{DOCS}/budgets.md"
    else:
        short, full = RULE_DOCS.get(rule_id, (rule_id, rule_id))
        uri = f"{DOCS}/rules.md#{rule_id}"
    return {"id": rule_id, "name": rule_id.replace(".", "-"), "shortDescription": {"text": short},
            "fullDescription": {"text": full}, "helpUri": uri,
            "properties": {"tags": ["jaxplace", "performance"]}}


def _fingerprint(rule_id: str, locations: list, extra: str = "") -> dict:
    """Stable across runs of the same code: no counts, bytes or times in it."""
    loc = locations[0]["physicalLocation"] if locations else {}
    key = "|".join([rule_id, loc.get("artifactLocation", {}).get("uri", ""),
                    str(loc.get("region", {}).get("startLine", 0)), extra])
    return {"jaxplace/v1": hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]}


def render(result: AuditResult, max_results: int = MAX_RESULTS) -> str:
    anchor = _anchor(result)

    def where(file, line):
        return _location(file, line) or _location(*anchor, audited=True)

    results = []
    if result.budget is not None:
        for b in result.budget.breaches:
            rid = f"budget.{b.rule}"
            locs = where(b.file, b.line)
            results.append({"ruleId": rid, "level": "error", "message": {"text": safe.plain(b.message)},
                            "locations": locs, "partialFingerprints": _fingerprint(rid, locs)})
    order = {s: i for i, s in enumerate(SEVERITIES)}
    for f in sorted(result.findings, key=lambda f: (order.get(f.severity, len(SEVERITIES)), -f.bytes, -f.count)):
        locs = where(f.file, f.line)
        text = safe.plain(f.message + (f" Fix: {f.fix}" if f.fix else ""))
        results.append({"ruleId": f.rule, "level": _LEVEL.get(f.severity, "note"), "message": {"text": text},
                        "locations": locs,
                        "partialFingerprints": _fingerprint(f.rule, locs, ",".join(f.devices) if not f.file else "")})
    dropped = max(len(results) - max_results, 0)
    results = results[:max_results]
    rules = sorted({r["ruleId"] for r in results})
    index = {r: i for i, r in enumerate(rules)}
    for r in results:
        r["ruleIndex"] = index[r["ruleId"]]
    run = {
        "tool": {"driver": {"name": "jaxplace", "version": __version__, "informationUri": HOME,
                            "rules": [_rule(r) for r in rules]}},
        "results": results,
        "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": [
            {"level": "note", "message": {"text": f"{dropped} more result{'s' if dropped != 1 else ''} {'were' if dropped != 1 else 'was'} left out (at most "
                                                  f"{max_results} per report)"}}] if dropped else []}],
    }
    doc = {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0", "runs": [run]}
    return json.dumps(doc, indent=2) + "\n"


def render_report(result: AuditResult, options) -> str:
    """The registry's entry point (report/base.py)."""
    return render(result)
