"""JUnit XML: one testcase per budget limit (failures carry the breach sentence), plus one
per finding rule, so any CI's test view shows what failed and why.

Only budget limits fail (``--fail-on`` is one): a rule's findings are listed in its
testcase's ``system-out``, so the test view agrees with the exit code — a report without a
budget never shows red tests for a job that passed.

Attributes CI systems read: ``time`` (seconds; the suite's is the recorded run's wall time,
each testcase's 0 — the audit checks the run, it does not time anything), ``timestamp``, and
``file``/``line`` on each testcase (GitLab links the file): the first breach's or finding's
site, else the audited script.

Every input string passes ``safe.xml``: a control character in a site path or message would
make the document ill-formed, and a CI's test view would then show nothing at all."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from datetime import datetime

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model import safe
from jaxplace_cli.model.paths import below
from jaxplace_cli.report.sarif import _anchor


def _run_seconds(manifest: dict) -> float:
    """The recorded run's wall time from its manifest (whole seconds: that is what it keeps)."""
    if hasattr(manifest, "to_dict"):
        manifest = manifest.to_dict()
    try:
        fmt = "%Y-%m-%dT%H:%M:%S%z"
        start = datetime.strptime(manifest["started"], fmt)
        end = datetime.strptime(manifest["ended"], fmt)
        return max((end - start).total_seconds(), 0.0)
    except (KeyError, TypeError, ValueError):
        return 0.0


def _where(items, anchor) -> tuple[str, int]:
    for x in items:
        if getattr(x, "file", "") and x.file != "?":
            return x.file, x.line
    return anchor


def render(result: AuditResult) -> str:
    m = result.manifest.to_dict() if hasattr(result.manifest, "to_dict") else (result.manifest or {})
    suite = ET.Element("testsuite", name="jaxplace", tests="0", failures="0", errors="0",
                       time=f"{_run_seconds(m):.3f}")
    if m.get("started"):
        suite.set("timestamp", safe.xml(m["started"]))
    cases = []
    if result.budget is not None:
        by_rule: dict = {}
        for br in result.budget.breaches:
            by_rule.setdefault(br.rule.split(".")[0] if br.rule.startswith("fail_on.") else br.rule, []).append(br)
        for limit in result.budget.limits:
            key = "fail_on" if limit.startswith("fail_on.") else limit
            cases.append((f"budget.{limit}", by_rule.get(key, [])))
    for rule in result.rules_checked or []:
        cases.append((f"rule.{rule}", [f for f in result.findings if f.rule == rule]))
    anchor = _anchor(result)
    failures = 0
    for name, fails in cases:
        file, line = _where(fails, anchor)
        case = ET.SubElement(suite, "testcase", classname="jaxplace.audit", name=safe.xml(name), time="0",
                             file=safe.xml(below(file) if os.path.isabs(file) else file))
        if line:
            case.set("line", str(line))
        if fails and name.startswith("rule."):
            out = ET.SubElement(case, "system-out")
            out.text = safe.xml("\n".join(f"[{f.severity}] {f.file}:{f.line}: {f.message}" if f.file
                                          else f"[{f.severity}] {f.message}" for f in fails))
        elif fails:
            failures += 1
            f = ET.SubElement(case, "failure", message=safe.xml(fails[0].message),
                              type="budget" if name.startswith("budget") else "finding")
            f.text = safe.xml("\n".join(x.message for x in fails))
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def render_report(result: AuditResult, options) -> str:
    """The registry's entry point (report/base.py)."""
    return render(result)
