"""Markdown: for $GITHUB_STEP_SUMMARY and merge-request comments."""
from __future__ import annotations

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.safe import code_span, markdown
from jaxplace_cli.model.sizes import human_bytes


def render(result: AuditResult) -> str:
    s = result.summary
    out = [f"## jaxplace audit: {code_span(result.path)}", ""]
    if result.budget is not None:
        b = result.budget
        out += [f"**Budget {'passed' if b.passed else 'FAILED'}** ({markdown(b.source)}, {len(b.limits)} limits)", ""]
        out += [f"- :x: {markdown(br.message)}" for br in b.breaches] + ([""] if b.breaches else [])
    out += ["| kind | count | bytes | small (< min) |", "|---|---:|---:|---:|"]
    for kind, tot in s.totals.items():
        out.append(f"| {markdown(kind)} | {tot.count:,} | {human_bytes(tot.bytes)} | {s.small[kind].count:,} |")
    if s.sites:
        out += ["", "| site | kind | count | bytes | how | api |", "|---|---|---:|---:|---|---|"]
        for t in s.sites[:10]:
            how = ("implicit" if t.implicit else "explicit") + (", blocking" if t.blocking else "")
            out.append(f"| {code_span(site_name(t.file, t.line), table=True)} | {markdown(t.kind)} | {t.count:,} | "
                       f"{human_bytes(t.bytes)} | {how} | {code_span(t.api, table=True)} |")
    if result.findings:
        out += ["", "### Findings", ""]
        for f in result.findings:
            where = f" {code_span(site_name(f.file, f.line))}" if f.file else ""
            out.append(f"- **{markdown(f.severity)}** {code_span(f.rule)}{where}: {markdown(f.message)}"
                       + (f" — *fix:* {markdown(f.fix)}" if f.fix else ""))
    if result.suggestion is not None:
        from jaxplace_cli.report.terminal import suggest_command

        cmd, _, then = suggest_command(result.path, result.suggestion).partition("   ")
        out += ["", "### Suggestion", "", f"{markdown(result.suggestion.summary)} ({code_span(cmd)}"
                f"{' ' + markdown(then) if then else ''})"]
    return "\n".join(out) + "\n"
