"""The HTML report's device memory chart (issue 27): live bytes per device over the run, one
SVG series per device (``data-device``), each device's peak marked with its holders.

Drawn on the server as inline SVG: no script, so it shows under the page's strict CSP and
in a mail client alike. The x axis is event order (seq), shared by every device; a series
keeps at most ``MAX_POINTS`` points, each bucket drawn at its largest value so no peak is
smoothed away. What is drawn is handed in (``result.memory``, analysis/memory.py)."""
from __future__ import annotations

from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.report.html_data import esc

MAX_POINTS = 2000
W, H, PAD_L, PAD_B, PAD_T = 900, 240, 70, 22, 12
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _buckets(series: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """At most MAX_POINTS (seq, bytes), the largest value of each seq bucket."""
    if len(series) <= MAX_POINTS:
        return series
    width = max(1, (hi - lo + 1) // MAX_POINTS + 1)
    out: dict[int, tuple[int, int]] = {}
    last = 0
    for seq, nbytes in series:
        k = (seq - lo) // width
        if k not in out or nbytes > out[k][1]:
            out[k] = (seq, nbytes)
        last = k
    out[last] = series[-1]  # the end state stays exact
    return [out[k] for k in sorted(out)]


def memory_chart(result) -> str:
    mem = getattr(result, "memory", None)
    if mem is None or not mem.devices:
        return ""
    seqs = [s for d in mem.devices for s, _ in d.series]
    lo, hi = (min(seqs), max(seqs)) if seqs else (0, 1)
    top = max(d.peak_bytes for d in mem.devices) or 1
    span = max(hi - lo, 1)

    def x(seq: int) -> float:
        return PAD_L + (W - PAD_L - 8) * (seq - lo) / span

    def y(nbytes: int) -> float:
        return H - PAD_B - (H - PAD_B - PAD_T) * nbytes / top

    parts = [f'<svg id="memory-chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
             f'aria-label="live bytes per device over the run">',
             f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - 8}" y2="{H - PAD_B}" stroke="#999"/>',
             f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="#999"/>',
             f'<text x="{PAD_L - 6}" y="{PAD_T + 10}" text-anchor="end" font-size="11">{esc(human_bytes(top))}</text>',
             f'<text x="{PAD_L - 6}" y="{H - PAD_B}" text-anchor="end" font-size="11">0</text>',
             f'<text x="{W - 8}" y="{H - 6}" text-anchor="end" font-size="11">event order (seq {lo}…{hi})</text>']
    legend = []
    for i, d in enumerate(mem.devices):
        color = COLORS[i % len(COLORS)]
        pts, prev = [f"{x(lo):.1f},{y(0):.1f}"], 0
        for seq, nbytes in _buckets(d.series, lo, hi):
            pts.append(f"{x(seq):.1f},{y(prev):.1f}")  # a step: the level holds until the event
            pts.append(f"{x(seq):.1f},{y(nbytes):.1f}")
            prev = nbytes
        pts.append(f"{x(hi):.1f},{y(prev):.1f}")
        dev = esc(d.device)
        parts.append(f'<polyline class="mem-series" data-device="{dev}" data-peak="{d.peak_bytes}" '
                     f'data-end="{d.end_bytes}" fill="none" stroke="{color}" stroke-width="1.5" '
                     f'points="{" ".join(pts)}"/>')
        holders = "; ".join(f"{site_name(h.file, h.line)} {human_bytes(h.bytes)}" for h in d.at_peak[:5])
        parts.append(f'<circle class="mem-peak" data-device="{dev}" data-bytes="{d.peak_bytes}" '
                     f'data-seq="{d.peak_seq}" cx="{x(d.peak_seq):.1f}" cy="{y(d.peak_bytes):.1f}" r="4" '
                     f'fill="{color}"><title>{dev} peak {esc(human_bytes(d.peak_bytes))} at seq {d.peak_seq}: '
                     f'{esc(holders)}</title></circle>')
        legend.append(f'<li data-device="{dev}"><span style="color:{color}">■</span> {dev}: peak '
                      f'{esc(human_bytes(d.peak_bytes))} ({esc(holders) or "nothing tracked"}), at exit '
                      f'{esc(human_bytes(d.end_bytes))}</li>')
    parts.append("</svg>")
    note = ("Live jax.Arrays per device, by event order; a dot marks each device's peak (hover it for "
            "the lines holding the bytes). XLA temporaries inside compiled programs are not counted.")
    return (f'<section id="memory"><h2>Device memory</h2><p class="note">{note}</p>{"".join(parts)}'
            f'<ul class="memory-legend">{"".join(legend)}</ul></section>')
