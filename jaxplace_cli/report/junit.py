"""JUnit XML: one testcase per budget limit (failures carry the breach sentence), plus one
per finding rule, so any CI's test view shows what failed and why.

Only budget limits fail (``--fail-on`` is one): a rule's findings are listed in its
testcase's ``system-out``, so the test view agrees with the exit code — a report without a
budget never shows red tests for a job that passed.

Every input string passes ``safe.xml``: a control character in a site path or message would
make the document ill-formed, and a CI's test view would then show nothing at all."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.safe import xml


def render(result: AuditResult) -> str:
    suite = ET.Element("testsuite", name="jaxplace", tests="0", failures="0", errors="0")
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
    failures = 0
    for name, fails in cases:
        case = ET.SubElement(suite, "testcase", classname="jaxplace.audit", name=xml(name))
        if fails and name.startswith("rule."):
            out = ET.SubElement(case, "system-out")
            out.text = xml("\n".join(f"[{f.severity}] {f.file}:{f.line}: {f.message}" if f.file
                                     else f"[{f.severity}] {f.message}" for f in fails))
        elif fails:
            failures += 1
            first = fails[0]
            msg = xml(first.message)
            f = ET.SubElement(case, "failure", message=msg, type="budget" if name.startswith("budget") else "finding")
            f.text = xml("\n".join(x.message for x in fails))
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
