"""The HTML report's ``#bytes-by-stack`` section (issue 28): an icicle of the bytes each user
frame's transfers moved (``analysis.stacks.StackTree``, handed in on the timeline).

Each frame is one static box (``div.sbox``) carrying its numbers as data attributes
(``data-bytes``/``data-count`` of every transfer at or below it, the same per kind), so the
section reads without script; ``assets/stacks.js`` lays the boxes out (widths by bytes of the
chosen kind), filters by kind and zooms on click. A box whose line has findings or a top-site
row links to them: the site row selects that line's moments on the timeline.
"""
from __future__ import annotations

from importlib import resources

from jaxplace_cli.analysis.summary import listed_sites
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.paths import below, file_name
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.report.html_data import esc

_STYLE = """
#stacks-box{position:relative;overflow:hidden;border:1px solid #ccc;min-height:24px}
#stacks-box .sbox{position:absolute;height:22px;box-sizing:border-box;border:1px solid #fff;
 overflow:hidden;white-space:nowrap;font:12px/20px monospace;padding:0 3px;cursor:pointer;color:#111}
#stacks-box .sbox.k-h2d{background:#9ecae1}#stacks-box .sbox.k-d2h{background:#fdae6b}
#stacks-box .sbox.k-d2d{background:#bcbddc}#stacks-box .sbox.folded{background:#ddd}
#stacks-box .sbox a{margin-left:4px}
#stacks-tools button{margin-right:4px}#stacks-tools button[aria-pressed=true]{font-weight:bold}
"""


def stacks_section(result, timeline) -> str:
    """The section, with its script (``assets/stacks.js``, inlined as report.js is); empty
    when the page has no run timeline to carry the tree."""
    tree = getattr(timeline, "stacks", None) if timeline is not None else None
    if tree is None:
        return ""
    head = '<section id="bytes-by-stack"><h2>Bytes by call stack</h2>'
    if not tree.roots:
        return head + "<p>No transfer was recorded.</p></section>"
    findings, sites = _links(result)
    kinds = [k for k in TRANSFER_KINDS if tree.bytes.get(k)]
    tools = "".join(f'<button type="button" data-kind="{k}" aria-pressed="{"true" if k == "all" else "false"}">'
                    f'{k}</button>' for k in ["all", *kinds])
    first, _, n_steady = tree.steady
    if n_steady:  # the step filter: every transfer, or those of the steps after warm-up
        tools += (f'<span class="stack-steps"> · <button type="button" data-step="all" aria-pressed="true">'
                  f'whole run</button><button type="button" data-step="steady" aria-pressed="false">'
                  f'{n_steady:,} steady-state steps</button></span>')
    out = [f"<style>{_STYLE}</style>", head,
           f'<p>Transferred bytes by the user\'s call stack: a box per frame, as wide as the bytes moved '
           f'at or below it ({esc(human_bytes(sum(tree.bytes.values())))} in all); click a box to zoom, '
           f'the top row to zoom out.{_folded(tree)}</p>',
           f'<div id="stacks-tools">{tools}</div>',
           f'<div id="stacks-box" data-frames="{tree.frames}" data-folded="{tree.folded}">']
    path: list = []  # box ids from the root row down to the current frame
    for i, (depth, f) in enumerate(tree.walk()):
        del path[depth:]
        out.append(_box(f, i, path[-1] if path else -1, depth, findings, sites))
        path.append(i)
    js = resources.files("jaxplace_cli.report").joinpath("assets/stacks.js").read_text()
    out.append(f"</div></section><script>{js}</script>")
    return "\n".join(out)


def _box(f, i: int, parent: int, depth: int, findings: dict, sites: dict) -> str:
    kind = max(f.bytes, key=lambda k: (f.bytes[k], k)) if f.bytes else "h2d"
    per_kind = "".join(f' data-{k}="{f.bytes.get(k, 0)}" data-{k}-count="{f.count.get(k, 0)}"'
                       f' data-steady-{k}="{f.steady_bytes.get(k, 0)}"' for k in TRANSFER_KINDS)
    per_kind += (f' data-steady="{sum(f.steady_bytes.values())}"'
                 f' data-steady-count="{sum(f.steady_count.values())}"')
    name = f"{file_name(f.file)}:{f.line} {f.function}" if f.real else f.function
    where = f"{below(f.file)}:{f.line} in {f.function}" if f.real else f.function
    title = f"{where}: {human_bytes(f.total)} ({f.total:,} B) in {f.total_count:,} transfers; " + \
        ", ".join(f"{k} {f.bytes[k]:,} B" for k in sorted(f.bytes))
    links = ""
    if f.real and not f.children:
        key = (f.file, f.line)
        if key in findings:
            links += f'<a href="#finding-{findings[key]}" class="stack-finding">findings</a>'
        if key in sites:
            links += f'<a href="#site-{sites[key]}" class="stack-moments" data-site-row="site-{sites[key]}">timeline</a>'
    cls = f"sbox k-{kind}" + ("" if f.real else " folded") + ("" if f.children else " leaf")
    return (f'<div class="{cls}" data-id="{i}" data-parent="{parent}" data-depth="{depth}" '
            f'data-bytes="{f.total}" data-count="{f.total_count}"{per_kind} data-site="{esc(f"{f.file}:{f.line}")}" '
            f'title="{esc(title)}"><span>{esc(name)}</span>{links}</div>')


def _links(result) -> tuple[dict, dict]:
    """(file, line) -> the first finding's index, and -> the first top-site row's id (as
    report/html.py numbers them)."""
    findings: dict = {}
    for i, f in enumerate(result.findings):
        findings.setdefault((f.file, f.line), i)
    s = result.summary
    index = {id(t): str(i) for i, t in enumerate(s.sites)} | {id(t): f"s{i}" for i, t in enumerate(s.small_sites)}
    sites: dict = {}
    for t in listed_sites(s):
        sites.setdefault((t.file, t.line), index[id(t)])
    return findings, sites


def _folded(tree) -> str:
    if not tree.folded:
        return ""
    return f" {tree.folded:,} smaller frames are folded into the grey (N more) boxes."
