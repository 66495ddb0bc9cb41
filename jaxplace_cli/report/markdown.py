"""Markdown: for $GITHUB_STEP_SUMMARY and merge-request comments.

The same order as the terminal report (report/terminal.py): the verdict first, then the
budget's breaches, the findings grouped by rule (top sites, "and N more"), the suggestion, and
the tables last. Every input-derived string goes through model/safe.py.
"""
from __future__ import annotations

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.summary import kind_all, listed_sites
from jaxplace_cli.model import safe
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.report.verdict import by_rule, verdict_parts

_ICON = {"error": ":x:", "warning": ":warning:", "info": ":information_source:"}


def render(result: AuditResult, max_findings: int = 3, verbose: bool = False) -> str:
    out = [f"## jaxplace audit: {safe.code_span(result.path)}", "",
           f"**{safe.markdown(' · '.join(verdict_parts(result)))}**", ""]
    if result.budget is not None:
        b = result.budget
        out += [f"**Budget {'passed' if b.passed else 'FAILED'}** ({safe.markdown(b.source)}, {len(b.limits)} limits)", ""]
        out += [f"- :x: {safe.markdown(br.message)}" for br in b.breaches] + ([""] if b.breaches else [])
    out += _findings(result, None if verbose else max_findings)
    if result.suggestion is not None:
        from jaxplace_cli.report.terminal import suggest_command

        cmd, _, then = suggest_command(result.path, result.suggestion).partition("   ")
        out += ["### Suggestion", "", f"{safe.markdown(result.suggestion.summary)} "
                f"({safe.code_span(cmd)}{' ' + safe.markdown(then) if then else ''})", ""]
    out += _tables(result, None if verbose else 10)
    return "\n".join(out).rstrip("\n") + "\n"


def _findings(result: AuditResult, cap: int | None) -> list[str]:
    if not result.findings:
        return ["No findings.", ""]
    out = ["### Findings", ""]
    for rule, group in by_rule(result.findings):
        shown = group if cap is None else group[:cap]
        out.append(f"- {_ICON.get(group[0].severity, '')} **{group[0].severity}** "
                   f"{safe.code_span(rule)} · {len(group)} site{'s' if len(group) != 1 else ''}")
        for f in shown:
            where = safe.code_span(site_name(f.file, f.line)) if f.file else "whole program"
            out.append(f"  - {where}: {safe.markdown(f.message)}"
                       + (f" — *fix:* {safe.markdown(f.fix)}" if f.fix else ""))
        if len(group) > len(shown):
            out.append(f"  - … and {len(group) - len(shown)} more (`--max-findings {len(group)}` or `--verbose`)")
    return out + [""]


def _tables(result: AuditResult, cap: int | None) -> list[str]:
    s = result.summary
    out = [f"| kind | count | bytes | of them small (< {human_bytes(s.min_bytes)}) |", "|---|---:|---:|---:|"]
    for kind in s.totals:
        both = kind_all(s, kind)
        out.append(f"| {safe.markdown(kind)} | {both.count:,} | {human_bytes(both.bytes)} | {s.small[kind].count:,} |")
    listed = listed_sites(s)
    if listed:
        out += ["", "| site | kind | count | bytes | how | api |", "|---|---|---:|---:|---|---|"]
        for t in listed if cap is None else listed[:cap]:
            how = ("implicit" if t.implicit else "explicit") + (", blocking" if t.blocking else "")
            small = f" ({'all' if not t.count else f'{t.small_count:,}'} small)" if t.small_count else ""
            out.append(f"| {safe.code_span(site_name(t.file, t.line), table=True)} | {safe.markdown(t.kind)} | "
                       f"{t.all_count:,}{small} | {human_bytes(t.all_bytes)} | {how} | {safe.code_span(t.api, table=True)} |")
    return out


def render_report(result: AuditResult, options) -> str:
    """The registry's entry point (report/base.py)."""
    from jaxplace_cli.report.terminal import DEFAULT_MAX_FINDINGS

    cap = DEFAULT_MAX_FINDINGS if options.max_findings is None else options.max_findings
    return render(result, max_findings=cap, verbose=options.verbose)
