"""Markdown: for $GITHUB_STEP_SUMMARY and merge-request comments."""
from __future__ import annotations

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.sizes import human_bytes


def render(result: AuditResult) -> str:
    s = result.summary
    out = [f"## jaxplace audit: `{result.path}`", ""]
    if result.budget is not None:
        b = result.budget
        out += [f"**Budget {'passed' if b.passed else 'FAILED'}** ({b.source}, {len(b.limits)} limits)", ""]
        out += [f"- :x: {br.message}" for br in b.breaches] + ([""] if b.breaches else [])
    out += ["| kind | count | bytes | small (< min) |", "|---|---:|---:|---:|"]
    for kind, tot in s.totals.items():
        out.append(f"| {kind} | {tot.count:,} | {human_bytes(tot.bytes)} | {s.small[kind].count:,} |")
    if s.sites:
        out += ["", "| site | kind | count | bytes | how | api |", "|---|---|---:|---:|---|---|"]
        for t in s.sites[:10]:
            how = ("implicit" if t.implicit else "explicit") + (", blocking" if t.blocking else "")
            out.append(f"| `{site_name(t.file, t.line)}` | {t.kind} | {t.count:,} | "
                       f"{human_bytes(t.bytes)} | {how} | `{t.api}` |")
    if result.findings:
        out += ["", "### Findings", ""]
        for f in result.findings:
            where = f" `{site_name(f.file, f.line)}`" if f.file else ""
            out.append(f"- **{f.severity}** `{f.rule}`{where}: {f.message}" + (f" — *fix:* {f.fix}" if f.fix else ""))
    if result.suggestion is not None:
        from jaxplace_cli.report.terminal import suggest_command

        cmd, _, then = suggest_command(result.path, result.suggestion).partition("   ")
        out += ["", "### Suggestion", "", f"{result.suggestion.summary} (`{cmd}`{' ' + then if then else ''})"]
    return "\n".join(out) + "\n"
