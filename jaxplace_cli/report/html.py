"""The HTML report: ONE self-contained file — timeline, transfer matrix, findings, steps, run.

No network: the page's Content-Security-Policy is ``default-src 'none'`` (inline script and
style only), its script and style are jaxplace's own (``report/assets/``, inlined), and the
data rides in the page as JSON. Everything that came from the run or a source file is
untrusted (docs/security.md): HTML text goes through ``esc`` (control characters shown, then
HTML-escaped), the JSON is escaped so it cannot close its ``<script>`` element, and the page's
script writes data into the DOM with ``textContent`` only.

The static sections (verdict, findings, sites, matrix, ops, run) are HTML written here, so
they read without script; the timeline and the per-step chart are drawn by the script from
the data (``report/html_data.py``).
"""
from __future__ import annotations

from importlib import resources

from jaxplace_cli import __version__
from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.summary import kind_all, listed_sites
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.paths import below, site_name
from jaxplace_cli.model.severity import SEVERITIES
from jaxplace_cli.model.sizes import human_bytes, plural
from jaxplace_cli.report.html_data import esc, payload, script_json
from jaxplace_cli.report.html_memory import memory_chart
from jaxplace_cli.report.html_stacks import stacks_section
from jaxplace_cli.report.html_tables import matrix, ops, processes, run_metadata, steps
from jaxplace_cli.report.verdict import cost_text, severity_counts, small_note

CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


def render(result: AuditResult, timeline=None, sources: dict | None = None) -> str:
    """The page. ``timeline``: the run's ``analysis.timeline.Timeline`` (``Audit.timeline()``;
    None: the page says where the input's timeline is); ``sources``: (file, line) -> the
    source line shown under a finding or site (``Audit.sources()``; None: none shown)."""
    sources = sources or {}
    css = resources.files("jaxplace_cli.report").joinpath("assets/report.css").read_text()
    js = resources.files("jaxplace_cli.report").joinpath("assets/report.js").read_text()
    body = "\n".join([
        _header(result), _verdict(result), _timeline(timeline, result), memory_chart(result, timeline),
        stacks_section(result, timeline),
        _findings(result, timeline, sources),
        _sites(result, timeline, sources), matrix(result), steps(result), ops(result), processes(result),
        run_metadata(result),
        f'<footer>jaxplace {esc(__version__)} · one self-contained file: no network, no external '
        'script or style</footer>'])
    page = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>jaxplace report · {esc(result.path)}</title><style>{css}</style></head>\n'
            f'<body>\n{body}\n<script type="application/json" id="jaxplace-data">'
            f'{script_json(payload(result, timeline))}</script>\n<script>{js}</script>\n</body></html>\n')
    # ASCII only (non-ASCII text as character references): the page reads the same whatever
    # encoding a tool assumes; the script and the JSON are ASCII already (\\u escapes)
    return page.encode("ascii", "xmlcharrefreplace").decode("ascii")


def render_report(result: AuditResult, options) -> str:
    """The registry's entry point (report/base.py): the timeline rides in ``options``."""
    return render(result, options.timeline, options.sources)


def _header(result: AuditResult) -> str:
    nav = " ".join(f'<a href="#{i}">{t}</a>' for i, t in (
        ("verdict", "verdict"), ("timeline", "timeline"), ("findings", "findings"), ("sites", "sites"),
        ("matrix", "matrix"), ("steps", "steps"), ("ops", "ops"), ("run", "run")))
    return (f'<header><h1>jaxplace report</h1><div class="path">{esc(result.path)}</div>'
            f'<nav>{nav}</nav></header>')


def verdict_text(result: AuditResult) -> tuple[str, str]:
    """(css class, sentence): a budget's verdict first, else the worst finding's severity."""
    counts = {s: sum(1 for f in result.findings if f.severity == s) for s in SEVERITIES}
    found = severity_counts(result.findings) if result.findings else ""
    if result.budget is not None and not result.budget.passed:
        n = len(result.budget.breaches)
        return "bad", f"budget FAILED ({n} breach{'es' if n != 1 else ''})" + (f"; findings: {found}" if found else "")
    cls = "bad" if counts["error"] else "warn" if counts["warning"] else "good"
    head = "budget passed; " if result.budget is not None else ""
    n = len(result.findings)
    return cls, head + (f"{n} finding{'s' if n != 1 else ''}: {found}" if result.findings else "no findings")


def _verdict(result: AuditResult) -> str:
    cls, text = verdict_text(result)
    s = result.summary
    moved = " · ".join(f"{k} {kind_all(s, k).count:,} ({human_bytes(kind_all(s, k).bytes)}"
                       f"{small_note(s.small[k].count, kind_all(s, k).count, s.min_bytes)})" for k in TRANSFER_KINDS)
    out = [f'<section id="verdict"><h2>Verdict</h2><p class="verdict {cls}" id="verdict-text">{esc(text)}</p>',
           f'<p id="verdict-moved">transfers: {esc(moved)} · {plural(s.ops_total, "op")} on '
           f'{plural(len(s.devices), "device")}</p>']
    if result.budget is not None:
        out += [f'<p class="breach">{esc(b.message)}</p>' for b in result.budget.breaches]
    if result.suggestion is not None:
        out.append(f'<p class="suggestion"><b>Suggestion:</b> {esc(result.suggestion.summary)}</p>')
    out += [f'<p class="note">note: {esc(n)}</p>' for n in result.notes]
    return "\n".join(out) + "</section>"


def _timeline(tl, result: AuditResult) -> str:
    if tl is None and result.distributed is not None:
        return ('<section id="timeline"><h2>Timeline</h2><p class="note">This input is a '
                'jax.distributed job whose processes are too big to draw on one page (past the timeline\'s detail '
                'budget), or whose timelines were not built. Draw one process with '
                f'<code>jaxplace report {esc(result.path)}/proc-&lt;i&gt;</code>, or all of them in '
                f'one Perfetto trace with <code>jaxplace export {esc(result.path)} --perfetto '
                'job.json.gz</code>.</p></section>')
    if tl is None and result.source == "run":
        return '<section id="timeline"><h2>Timeline</h2><p class="note">No timeline was drawn for this page.</p></section>'
    if tl is None:
        return ('<section id="timeline"><h2>Timeline</h2><p class="note">This input is a '
                'jax.profiler trace, not a jaxplace run: jaxplace draws its timeline from a run\'s '
                'own events. Open the trace itself with <code>jaxplace view</code>.</p></section>')
    d = tl.detail
    return f"""<section id="timeline"><h2>Timeline</h2>
<p class="lod" id="lod-note">{esc(d.how)}. The view opens on the steady-state steps (after
warm-up); "whole run" shows start-up and compiles too. Bars are host-side dispatch of each op (device time is
not recorded by jaxplace's hooks: JAX dispatches asynchronously; the run's jax.profiler trace window
has it — <code>jaxplace view</code>). Arrows are transfers: <span class="k-h2d">h2d</span>
<span class="k-d2h">d2h</span> <span class="k-d2d">d2d</span>; dashed = implicit, thick = blocking.</p>
<div class="toolbar"><button type="button" id="zoom-in">zoom in</button><button type="button" id="zoom-out">zoom out</button>
<button type="button" id="zoom-steady">steady state</button><button type="button" id="zoom-reset">whole run</button><button type="button" id="clear-selection">clear selection</button>
<span id="view-range"></span>
<span class="hint">wheel: zoom · drag: pan · click a finding or site: its moments</span></div>
<div id="selection" class="selection"></div>
<div id="timeline-box" data-lanes="{len(tl.lanes)}" data-selected="0"><canvas id="timeline-canvas"></canvas>
<div id="tooltip" class="tooltip" hidden></div></div>{_process_groups(result, tl)}</section>"""


def _process_groups(result: AuditResult, tl) -> str:
    """A job's lane groups: per process its lanes (devices), its own verdict and the
    collectives its trace holds; the findings below are the job's, merged."""
    view = result.distributed
    if view is None or not tl.groups:
        return ""
    by_label = {f"p{v.index}": v for v in view.processes}
    out = ['<div id="process-groups"><p class="note">This input is a jax.distributed job: one lane group per '
           'process, each aligned on its own first event. The findings below are the whole job\'s.</p>']
    for label, lanes in tl.groups:
        v = by_label.get(label)
        cls, text = verdict_text(v.result) if v is not None and v.result is not None else ("bad", "not readable")
        coll = [c for c in view.collectives if v is not None and c.process == v.index]
        moved = ", ".join(f"{c.kind} ×{c.count:,}" for c in coll[:6]) or "none in its trace"
        out.append(f'<div class="process-group" data-process="{esc(label)}" data-lanes="{",".join(map(str, lanes))}">'
                   f'<b>{esc(label)}</b> {esc(v.host if v else "")} · lanes: '
                   f'{esc(", ".join(tl.lanes[i] for i in lanes))} · <span class="verdict-small {cls}">{esc(text)}</span>'
                   f' · collectives: {esc(moved)}</div>')
    return "\n".join(out) + "</div>"


def _source(sources: dict, file: str, line: int) -> str:
    text = sources.get((file, line))
    if text is None:
        return ""
    return f'<pre class="src"><span class="ln">{line}</span> {esc(text)}</pre>'


def _moment_attr(tl, key: str) -> str:
    if tl is None:
        return ""
    m = tl.moments.get(key, {})
    return f' data-moment="{esc(key)}" data-moments="{m.get("total", 0)}" tabindex="0"'


def _findings(result: AuditResult, tl, sources: dict) -> str:
    out = [f'<section id="findings"><h2>Findings ({len(result.findings)})</h2>']
    if not result.findings:
        out.append('<p class="good">No findings.</p>')
    groups: dict[str, list] = {}
    for i, f in enumerate(result.findings):
        groups.setdefault(f.rule, []).append((i, f))
    for rule, items in groups.items():
        out.append(f'<details open class="group"><summary><b>{esc(rule)}</b> · {len(items)} '
                   f'finding{"s" if len(items) > 1 else ""}</summary>')
        for i, f in items:
            m = tl.moments.get(f"finding:{i}", {}) if tl is not None else {}
            where = f' at <span class="site" title="{esc(f.file)}">{esc(site_name(f.file, f.line))}</span>' if f.file else ""
            cost = cost_text(f)
            shown = (f'<span class="moments">{m.get("total", 0):,} moments on the timeline — click to select</span>'
                     if m.get("total") else '<span class="moments">no single moment on the timeline</span>')
            out.append(f'<div class="finding sev-{esc(f.severity)}" id="finding-{i}"{_moment_attr(tl, f"finding:{i}")}'
                       f' data-devices="{esc(",".join(f.devices))}">'
                       f'<div><span class="sev">{esc(f.severity)}</span> <b>{esc(f.rule)}</b>{where} {shown}</div>'
                       f'<p>{esc(f.message)}</p>{_source(sources, f.file, f.line)}'
                       + (f'<p class="cost">cost: {esc(cost)}</p>' if cost else "")
                       + "".join(f'<div class="related">at {esc(site_name(r.get("file", ""), r.get("line", 0)))}: '
                                 f'{esc(r.get("role", ""))}{_source(sources, r.get("file"), r.get("line"))}</div>'
                                 for r in f.related[:8] if isinstance(r, dict))
                       + (f'<p class="fix">fix: {esc(f.fix)}</p>' if f.fix else "") + "</div>")
        out.append("</details>")
    return "\n".join(out) + "</section>"


def _sites(result: AuditResult, tl, sources: dict) -> str:
    s = result.summary
    out = [f'<section id="sites"><h2>Top transfer sites (by bytes; small: under {esc(human_bytes(s.min_bytes))} each)</h2>']
    listed = listed_sites(s)
    if not listed:
        return out[0] + '<p>No transfer was recorded at a site.</p></section>'
    out.append('<table class="sites"><thead><tr><th>site</th><th>kind</th><th>count</th><th>bytes</th>'
               '<th>how</th><th>api</th><th>routes</th><th>moments</th></tr></thead><tbody>')
    # the timeline's moments are per site: "site:i" of ``sites``, "site:si" of ``small_sites``
    index = {id(t): str(i) for i, t in enumerate(s.sites)} | {id(t): f"s{i}" for i, t in enumerate(s.small_sites)}
    for t in listed:
        i = index[id(t)]
        key = f"site:{i}"
        how = ("implicit" if t.implicit else "explicit") + (", blocking" if t.blocking else "")
        total = tl.moments.get(key, {}).get("total", 0) if tl is not None else 0
        small = f' <span class="small">({"all" if not t.count else f"{t.small_count:,}"} small)</span>' if t.small_count else ""
        out.append(f'<tr class="site-row" id="site-{i}"{_moment_attr(tl, key)}>'
                   f'<td><span class="site" title="{esc(t.file)}">{esc(below(t.file))}:{t.line}</span>'
                   f'{_source(sources, t.file, t.line)}</td><td class="k-{esc(t.kind)}">{esc(t.kind)}</td>'
                   f'<td class="num" data-count="{t.all_count}" data-small-count="{t.small_count}">{t.all_count:,}{small}</td>'
                   f'<td class="num">{esc(human_bytes(t.all_bytes))}</td>'
                   f'<td>{esc(how)}</td><td>{esc(t.api)}</td><td>{esc(", ".join(t.routes))}</td>'
                   f'<td class="num">{total:,}</td></tr>')
    return "\n".join(out) + "</tbody></table></section>"
