"""The verdict and the grouping every human-readable report shares (text, rich, Markdown), so
they say the same thing in the same order."""
from __future__ import annotations

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.summary import kind_all, listed_sites
from jaxplace_cli.model import safe
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.severity import SEVERITIES
from jaxplace_cli.model.sizes import human_bytes, human_ns


def severity_counts(findings) -> str:
    """``1 error, 2 warnings`` (``no findings`` when there are none)."""
    parts = []
    for sev in SEVERITIES:
        n = sum(f.severity == sev for f in findings)
        if n:
            parts.append(f"{n} {sev}{'s' if n != 1 and sev != 'info' else ''}")
    return ", ".join(parts) or "no findings"


def verdict_parts(result: AuditResult) -> list[str]:
    """The verdict line's parts: the budget (when one was checked), the findings by severity,
    the biggest transfer cost (the top site by bytes)."""
    parts = []
    b = result.budget
    if b is not None:
        n = len(b.breaches)
        parts.append(f"budget passed ({len(b.limits)} limits)" if b.passed
                     else f"budget FAILED ({n} breach{'es' if n != 1 else ''}, {len(b.limits)} limits)")
    counts = severity_counts(result.findings)
    parts.append(counts if counts == "no findings" else f"findings: {counts}")
    s = result.summary
    listed = listed_sites(s, 1)
    if listed:
        top = listed[0]
        how = "implicit" if top.implicit else "explicit"
        parts.append(f"biggest transfer cost: {human_bytes(top.all_bytes)} {safe.plain(top.kind)} at "
                     f"{safe.plain(site_name(top.file, top.line))} ({top.all_count:,}×, {how}"
                     f"{small_note(top.small_count, top.all_count, s.min_bytes)})")
    elif any(kind_all(s, k).count for k in s.totals) or any(s.unknown_size.values()):
        parts.append("no transfer site recorded")  # a foreign trace: kinds, no sites
    else:
        parts.append("no transfers")
    return parts


def small_note(small: int, total: int, min_bytes: int) -> str:
    """``, all < 1.0 KiB`` / ``, 200 of them < 1.0 KiB`` / "": small transfers marked, never dropped."""
    if not small:
        return ""
    return f", {'all' if small == total else f'{small:,} of them'} < {human_bytes(min_bytes)}"


def by_rule(findings) -> list[tuple[str, list]]:
    """Findings grouped by rule and severity (a rule that warns on one site and only informs
    on another, as implicit-h2d-in-loop does for a re-uploaded array and a data loader, is two
    groups: a heading never calls an info a warning): the worst severity (then most bytes, most
    count) first; within a group, most costly first."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    groups: dict[tuple[str, str], list] = {}
    for f in findings:
        groups.setdefault((f.rule, f.severity), []).append(f)
    for g in groups.values():
        g.sort(key=lambda f: (-f.bytes, -f.count))
    ranked = sorted(groups.items(), key=lambda kv: (order.get(kv[0][1], 9), -sum(f.bytes for f in kv[1]),
                                                    -sum(f.count for f in kv[1]), kv[0][0]))
    return [(rule, group) for (rule, _), group in ranked]


def cost_text(f) -> str:
    """A finding's cost in one line (``8× · 1.0 MiB · 1/step (...)``): terminal and HTML say it alike."""
    parts = [f"{f.count:,}×"] if f.count else []
    if f.bytes:
        parts.append(human_bytes(f.bytes))
    if f.time_ns:
        parts.append(human_ns(f.time_ns))
    if f.per_step:
        p = f.per_step
        parts.append(f"{p.get('median', 0):g}/step (min {p.get('min')}, max {p.get('max')}, {p.get('steps')} steps)")
    return " · ".join(parts)
