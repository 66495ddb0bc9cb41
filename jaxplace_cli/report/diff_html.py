"""`jaxplace diff A B -o d.html`: the two runs compared on one self-contained page (issue 28).

Both sides' per-step transfer bars side by side, on one scale, then the per-kind totals and
the per-site deltas. Like the audit's page it needs nothing from the network (the same
Content-Security-Policy, jaxplace's own style inlined) and it needs no script at all: the
bars are inline SVG written here. Every text from a side (paths, site keys, notes) is
escaped (``html_data.esc``); the numbers ride as ``data-*`` attributes for tests and tools.
"""
from __future__ import annotations

from importlib import resources

from jaxplace_cli import __version__
from jaxplace_cli.analysis.diff import Diff
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.report.html import CSP
from jaxplace_cli.report.html_data import esc

W, H, PAD_L, PAD_B = 520, 200, 64, 20
MAX_BARS = 1000  # steps drawn per side; more are drawn by bucket, each at its largest step
COLORS = {"h2d": "#e8871e", "d2h": "#d6404e", "d2d": "#7b3fe4"}
SITES_MAX = 200


def _pct(p) -> str:
    return "" if p is None else "new" if p == float("inf") else f"{p:+.1f}%"


def _totals(steps: dict) -> list[int]:
    kinds = steps["kinds"].values()
    n = max((len(v["bytes"]) for v in kinds), default=0)
    return [sum(v["bytes"][i] for v in kinds if i < len(v["bytes"])) for i in range(n)]


def _bars(side: str, name: str, steps: dict | None, top: int) -> str:
    head = f'<div class="diff-side" data-side="{side}"><h3>{side}: <code>{esc(name)}</code></h3>'
    if steps is None:
        return head + '<p class="note">No steps detected on this side.</p></div>'
    n = len(_totals(steps))
    per = max(1, -(-n // MAX_BARS))  # steps per bar
    bars = -(-n // per)
    bw = (W - PAD_L - 6) / max(1, bars)
    out = [head, f'<svg class="diff-steps" data-side="{side}" data-steps="{n}" viewBox="0 0 {W} {H}" '
                 f'width="{W}" height="{H}" role="img" aria-label="bytes moved per step, {side}">',
           f'<text x="4" y="12" font-size="11">{esc(human_bytes(top))}</text>',
           f'<text x="4" y="{H - PAD_B}" font-size="11">0</text>',
           f'<text x="{PAD_L}" y="{H - 5}" font-size="11">step → ({n:,}; warm-up grey)</text>']
    for b in range(bars):
        lo, hi = b * per, min(n, (b + 1) * per)
        i = max(range(lo, hi), key=lambda j: _totals_at(steps, j))  # the bucket's largest step
        y, x = H - PAD_B, PAD_L + b * bw
        for k in TRANSFER_KINDS:
            v = steps["kinds"].get(k, {"bytes": []})["bytes"]
            nbytes = v[i] if i < len(v) else 0
            if not nbytes:
                continue
            h = (H - PAD_B - 8) * nbytes / top
            y -= h
            color = "#c9ccd3" if i < steps["warmup"] else COLORS[k]
            out.append(f'<rect class="step-bar" data-step="{i}" data-kind="{k}" data-bytes="{nbytes}" '
                       f'x="{x:.1f}" y="{y:.1f}" width="{max(1.0, bw - (1 if bw > 3 else 0)):.1f}" height="{h:.1f}" '
                       f'fill="{color}"><title>step {i + 1} {k}: {esc(human_bytes(nbytes))}</title></rect>')
    return "".join(out) + "</svg></div>"


def _totals_at(steps: dict, i: int) -> int:
    return sum(v["bytes"][i] for v in steps["kinds"].values() if i < len(v["bytes"]))


def render(d: Diff, options) -> str:
    css = resources.files("jaxplace_cli.report").joinpath("assets/report.css").read_text()
    sides = [d.steps.get("base"), d.steps.get("new")]
    top = max([1] + [t for s in sides if s for t in _totals(s)])
    kinds = "".join(
        f'<tr data-kind="{k.kind}" data-base-count="{k.base_count}" data-new-count="{k.new_count}" '
        f'data-base-bytes="{k.base_bytes}" data-new-bytes="{k.new_bytes}"><td class="k-{k.kind}">{k.kind}</td>'
        f'<td class="num">{k.base_count:,} → {k.new_count:,}</td><td class="num">{esc(human_bytes(k.base_bytes))} → '
        f'{esc(human_bytes(k.new_bytes))}</td><td class="num">{esc(_pct(k.bytes_pct))}</td></tr>' for k in d.kinds)
    rows = "".join(
        f'<tr class="site-delta" data-status="{esc(s.status)}" data-base-bytes="{s.base_bytes}" '
        f'data-new-bytes="{s.new_bytes}" data-base-count="{s.base_count}" data-new-count="{s.new_count}">'
        f'<td><span class="site">{esc(s.key)}</span>{f" (was line {s.moved_from})" if s.status == "moved" else ""}</td>'
        f'<td>{esc(s.status)}</td><td class="num">{s.base_count:,} → {s.new_count:,}</td>'
        f'<td class="num">{esc(human_bytes(s.base_bytes))} → {esc(human_bytes(s.new_bytes))}</td>'
        f'<td class="num">{s.new_bytes - s.base_bytes:+,} B</td></tr>' for s in d.sites[:SITES_MAX])
    more = f'<p class="note">… and {len(d.sites) - SITES_MAX:,} more sites.</p>' if len(d.sites) > SITES_MAX else ""
    fails = "".join(f'<p class="breach">{esc(f)}</p>' for f in options.failures)
    notes = "".join(f'<p class="note">note: {esc(n)}</p>' for n in d.notes)
    body = (f'<header><h1>jaxplace diff</h1><div class="path">{esc(d.base)} → {esc(d.new)}</div></header>'
            f'<section id="diff-verdict">{fails}{notes}</section>'
            f'<section id="diff-steps"><h2>Bytes moved per step (one scale for both)</h2>'
            f'<div class="diff-sides">{_bars("base", d.base, sides[0], top)}{_bars("new", d.new, sides[1], top)}</div></section>'
            f'<section id="diff-kinds"><h2>Per kind</h2><table class="totals"><thead><tr><th>kind</th><th>count</th>'
            f'<th>bytes</th><th>change</th></tr></thead><tbody>{kinds}</tbody></table></section>'
            f'<section id="diff-sites"><h2>Per site ({len(d.sites):,})</h2><table class="sites"><thead><tr><th>site</th>'
            f'<th>status</th><th>count</th><th>bytes</th><th>delta</th></tr></thead><tbody>{rows}</tbody></table>{more}</section>'
            f'<footer>jaxplace {esc(__version__)} · one self-contained file: no network, no script</footer>')
    page = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>jaxplace diff · {esc(d.base)} → {esc(d.new)}</title><style>{css}</style></head>\n'
            f'<body>\n{body}\n</body></html>\n')
    return page.encode("ascii", "xmlcharrefreplace").decode("ascii")
