"""The HTML report's tables: transfer matrix, per-step summary, ops per device, run metadata.

The matrix is the audit's own route totals (``Summary.routes``) laid out source × destination,
so its totals are the audit JSON's ``transfers.totals`` and ``transfers.small`` by
construction; every cell carries its numbers as ``data-*`` attributes (the browser test reads
them back). A cell shows every transfer of known size, the small ones marked (issue 26: a
route of 9,000 64-byte bounces read "0" when the cell showed only those of ``min_bytes``).
"""
from __future__ import annotations

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.summary import kind_all
from jaxplace_cli.model.events import HOST, TRANSFER_KINDS
from jaxplace_cli.model.sizes import human_bytes, human_ns, plural
from jaxplace_cli.report.html_data import esc


def _endpoints(result: AuditResult) -> list[str]:
    seen = {x for r in result.summary.routes for x in (r.src, r.dst)}
    order = [HOST] + [d for d in result.summary.devices if d != HOST]
    return [e for e in order if e in seen] + sorted(seen - set(order))


MATRIX_MAX = 64  # endpoints drawn; past it the rest are one row and column (a hostile store with
# 3,000 devices made a 198 MiB page of empty cells: the matrix is quadratic in its endpoints)


def _fold(ends: list[str], cells: dict) -> tuple[list[str], dict, int]:
    """The MATRIX_MAX - 1 endpoints that moved the most, and the rest as one; sums unchanged."""
    if len(ends) <= MATRIX_MAX:
        return ends, cells, 0
    moved: dict[str, int] = dict.fromkeys(ends, 0)
    for (src, dst), c in cells.items():
        for e in (src, dst):
            moved[e] += c[1] + c[3] + c[5]
    pos = {e: i for i, e in enumerate(ends)}
    keep = set(sorted(ends, key=lambda e: (-moved[e], pos[e]))[:MATRIX_MAX - 1])
    other = f"{len(ends) - len(keep):,} others"
    folded: dict[tuple[str, str], list] = {}
    for (src, dst), c in cells.items():
        f = folded.setdefault((src if src in keep else other, dst if dst in keep else other), [set(), 0, 0, 0, 0, 0])
        f[0] |= c[0]
        for i in range(1, 6):
            f[i] += c[i]
    return [e for e in ends if e in keep] + [other], folded, len(ends) - len(keep)


def matrix(result: AuditResult) -> str:
    s = result.summary
    ends = _endpoints(result)
    cells: dict[tuple[str, str], list] = {}
    for r in s.routes:
        c = cells.setdefault((r.src, r.dst), [set(), 0, 0, 0, 0, 0])
        c[0].add(r.kind)
        c[1] += r.count
        c[2] += r.bytes
        c[3] += r.small_count
        c[4] += r.small_bytes
        c[5] += r.unknown_size
    ends, cells, folded = _fold(ends, cells)
    out = [f'<section id="matrix"><h2>Transfer matrix</h2><p>Rows: source, columns: destination. '
           'Each cell: every transfer of known size (count · bytes), how many of them were small '
           f'(under {esc(human_bytes(s.min_bytes))} each), then those of unknown size. Totals are the audit\'s.'
           + (f' The {folded:,} endpoints that moved least are one row and column.' if folded else '') + '</p>']
    if not ends:
        return out[0] + "<p>No transfers were recorded.</p></section>"
    out.append('<table class="matrix" id="matrix-table"><thead><tr><th>src \\ dst</th>'
               + "".join(f"<th>{esc(e)}</th>" for e in ends) + "</tr></thead><tbody>")
    for src in ends:
        row = [f"<tr><th>{esc(src)}</th>"]
        for dst in ends:
            c = cells.get((src, dst))
            if c is None:
                row.append('<td class="empty"></td>')
                continue
            kinds = ",".join(sorted(c[0]))
            small = (f'<div class="small">{"all" if not c[1] else f"{c[3]:,}"} small · '
                     f'{esc(human_bytes(c[4]))}</div>' if c[3] else "")
            unknown = f'<div class="small">+{c[5]:,} size unknown</div>' if c[5] else ""
            row.append(f'<td class="cell k-{esc(kinds)}" data-src="{esc(src)}" data-dst="{esc(dst)}" '
                       f'data-kind="{esc(kinds)}" data-count="{c[1]}" data-bytes="{c[2]}" '
                       f'data-small-count="{c[3]}" data-small-bytes="{c[4]}" data-unknown="{c[5]}">'
                       f'<b>{c[1] + c[3]:,}</b> · {esc(human_bytes(c[2] + c[4]))}{small}{unknown}</td>')
        out.append("".join(row) + "</tr>")
    out.append('</tbody></table><table class="totals" id="matrix-totals"><thead><tr><th>kind</th><th>count</th>'
               '<th>bytes</th><th>of them small</th><th>small bytes</th><th>size unknown</th></tr></thead><tbody>')
    for k in TRANSFER_KINDS:
        t, sm, both = s.totals[k], s.small[k], kind_all(s, k)
        out.append(f'<tr data-kind="{k}" data-count="{t.count}" data-bytes="{t.bytes}" data-small-count="{sm.count}" '
                   f'data-small-bytes="{sm.bytes}"><td class="k-{k}">{k}</td><td class="num">{both.count:,}</td>'
                   f'<td class="num">{esc(human_bytes(both.bytes))} ({both.bytes:,} B)</td><td class="num">{sm.count:,}</td>'
                   f'<td class="num">{sm.bytes:,} B</td><td class="num">{s.unknown_size.get(k, 0):,}</td></tr>')
    return "\n".join(out) + "</tbody></table></section>"


def steps(result: AuditResult) -> str:
    info = result.steps
    out = ['<section id="steps"><h2>Transfers per step</h2>']
    if info is None or not info.steps:
        detail = info.detail if info is not None else "this input has no step information"
        return out[0] + f"<p>No steps detected ({esc(detail)}).</p></section>"
    out.append(f'<p>{len(info.steps):,} steps by {esc(info.method)} ({esc(info.detail)}); the first '
               f'{info.warmup} is warm-up. The chart shows every transfer of each step, small ones '
               'included; click a bar to see that step on the timeline.</p>'
               '<div class="toolbar"><label><input type="radio" name="stepmode" value="bytes" checked> bytes</label>'
               '<label><input type="radio" name="stepmode" value="count"> count</label></div>'
               '<div id="steps-box"><canvas id="steps-canvas"></canvas><div id="steps-tip" class="tooltip" hidden></div></div>'
               '<table class="totals"><thead><tr><th>kind</th><th>count min/median/max</th>'
               '<th>bytes min/median/max</th></tr></thead><tbody>')
    for kind, st in result.step_transfers.items():
        d = st.summary(info.warmup)
        out.append(f'<tr><td class="k-{esc(kind)}">{esc(kind)}</td><td>{d["min"]}/{d["median"]:g}/{d["max"]}</td>'
                   f'<td>{esc(human_bytes(d["bytes_min"]))}/{esc(human_bytes(int(d["bytes_median"])))}/'
                   f'{esc(human_bytes(d["bytes_max"]))}</td></tr>')
    return "\n".join(out) + "</tbody></table></section>"


def ops(result: AuditResult) -> str:
    s = result.summary
    out = [f'<section id="ops"><h2>Ops per device ({plural(s.ops_total, "op")}'
           + (f", {s.op_errors} failed" if s.op_errors else "") + ')</h2><table class="totals"><thead><tr>'
           '<th>device</th><th>ops</th><th>dispatch time</th><th>device time</th><th>most frequent</th></tr></thead><tbody>']
    for d in s.ops_by_device:
        out.append(f'<tr><td>{esc(d.device)}</td><td class="num">{d.count:,}</td>'
                   f'<td class="num">{esc(human_ns(d.dispatch_ns or 0))}</td>'
                   f'<td class="num">{esc(human_ns(d.device_ns)) if d.device_ns is not None else "not recorded"}</td>'
                   f'<td>{esc(", ".join(f"{n}×{c}" for n, c in d.top))}</td></tr>')
    return "\n".join(out) + "</tbody></table></section>"


def _dl(items) -> str:
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items if v not in (None, "", [])) + "</dl>"


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _steps_text(steps) -> str:
    """``, steps 52-53``: the marked steps inside the trace window (run.json ``trace.steps``)."""
    if not (isinstance(steps, list) and len(steps) == 2 and all(isinstance(x, int) for x in steps)):
        return ""
    return f", step {steps[0]}" if steps[0] == steps[1] else f", steps {steps[0]}-{steps[1]}"


def run_metadata(result: AuditResult) -> str:
    """The manifest's facts; any field may be missing or of another type (a hand-edited run)."""
    m = result.manifest.to_dict() if hasattr(result.manifest, "to_dict") else result.manifest
    m = m if isinstance(m, dict) else {}
    ev = m.get("events", {}) if isinstance(m.get("events"), dict) else {}
    trace = m.get("trace", {}) if isinstance(m.get("trace"), dict) else {}
    hooks = m.get("hooks", {}) if isinstance(m.get("hooks"), dict) else {}
    devices = m.get("devices", []) if isinstance(m.get("devices"), list) else []
    dev_text = ", ".join(f"{d.get('name')} ({d.get('kind')})" for d in devices if isinstance(d, dict))
    placement = m.get("placement") if isinstance(m.get("placement"), dict) else None
    items = [
        ("command", " ".join(map(str, _list(m.get("command"))))),
        ("script", " ".join(map(str, _list(m.get("argv"))))),
        ("working directory", m.get("cwd")),
        ("status", ("killed before it finished (no exit code)" if m.get("status") == "running" and m.get("exit_code") is None
                    else f"{m.get('status')} (exit {m.get('exit_code')})") + (f": {m['error']}" if m.get("error") else "")),
        ("started / ended", f"{m.get('started', '?')} / {m.get('ended', '?')}"),
        ("versions", f"jaxplace {m.get('tool_version', '?')}, python {m.get('python', '?')}, "
                     f"jax {m.get('jax_version', '?')}, jaxlib {m.get('jaxlib_version', '?')}"),
        ("host", m.get("host")),
        ("devices", dev_text or ", ".join(result.summary.devices)),
        ("policy", m.get("policy")),
        ("placement", f"{placement.get('policy')}: {placement.get('decisions')} decisions, "
                      f"{placement.get('fallbacks')} fallbacks" if placement else ""),
        ("hooks installed", ", ".join(map(str, _list(hooks.get("installed"))))),
        ("hooks unavailable", ", ".join(map(str, _list(hooks.get("unavailable"))))),
        ("events", f"{ev.get('ops', '?')} ops, {ev.get('transfers', '?')} transfers, "
                   f"{ev.get('lost_rows', 0)} lost" if ev else ""),
        ("jax.profiler trace", f"{trace.get('mode')} ({trace.get('state')}, {trace.get('traced_ops', 0)} ops"
                               f"{_steps_text(trace.get('steps'))}): "
                               f"open it with jaxplace view {result.path}" if trace.get("files") else
                               (f"{trace.get('mode')} ({trace.get('state')})" if trace else "")),
    ]
    return f'<section id="run"><h2>Run</h2>{_dl(items)}</section>'


def processes(result: AuditResult) -> str:
    """A jax.distributed job's processes (how each ended, its devices, ops and transfers);
    nothing for a single run."""
    view = result.distributed
    if view is None:
        return ""
    out = [f'<section id="processes"><h2>Processes ({view.process_count})</h2><table class="totals"><thead><tr>'
           '<th>process</th><th>host</th><th>ended</th><th>devices</th><th>ops</th><th>transfers</th>'
           '<th>run</th></tr></thead><tbody>']
    for v in view.processes:
        every = {k: kind_all(v, k) for k in v.totals}  # small ones too, as the merged totals
        moved = ", ".join(f"{k} {t.count:,} ({human_bytes(t.bytes)})" for k, t in every.items() if t.count)
        out.append(f'<tr><td>p{v.index}</td><td>{esc(v.host)}</td><td>{esc(v.died or v.ended)}</td>'
                   f'<td>{esc(", ".join(v.devices))}</td><td class="num">{v.ops:,}</td>'
                   f'<td>{esc(moved or v.error or "none")}</td><td>{esc(v.path)}</td></tr>')
    if view.missing:
        out.append(f'<tr><td colspan="7">missing: {esc(", ".join(f"p{i}" for i in view.missing))}</td></tr>')
    return "\n".join(out) + "</tbody></table></section>"
