"""The HTML report's device memory chart (issues 27, 28): live bytes per device over the run,
one SVG series per device (``data-device``), each device's peak marked with its holders.

Drawn on the server as inline SVG, so it reads without script. With the run's timeline the x
axis is time, the timeline's: the page's script keeps the chart on the timeline's visible
range as it zooms, and a click lists the lines holding each device's bytes at that moment
(``analysis/memory_view.py`` hands in the points, their times and those holders). Without
one (a job's merged audit) the x axis is event order (seq). At most ``MAX_POINTS`` points
per series, each seq bucket at its largest value so no peak is smoothed away."""
from __future__ import annotations

from jaxplace_cli.analysis.memory_view import buckets
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.report.html_data import esc

W, H, PAD_L, PAD_B, PAD_T = 900, 240, 96, 22, 12  # PAD_L: the timeline's label column
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def memory_chart(result, tl=None) -> str:  # long: one SVG, axis, then a series per device
    mem = getattr(result, "memory", None)
    if mem is None or not mem.devices:
        return ""
    spans = [sp for d in mem.devices if (sp := d.series.span()) is not None]
    lo, hi = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 1)
    top = max(d.peak_bytes for d in mem.devices) or 1
    timed = {m["device"]: m for m in (tl.memory if tl is not None else [])}
    span = max(tl.t1 - tl.t0, 1) if timed else max(hi - lo, 1)

    def x(at: int) -> float:
        return PAD_L + (W - PAD_L - 8) * (at - (0 if timed else lo)) / span

    def y(nbytes: int) -> float:
        return H - PAD_B - (H - PAD_B - PAD_T) * nbytes / top

    parts = [f'<svg id="memory-chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
             f'aria-label="live bytes per device over the run">',
             f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - 8}" y2="{H - PAD_B}" stroke="#999"/>',
             f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="#999"/>',
             f'<text x="{PAD_L - 6}" y="{PAD_T + 10}" text-anchor="end" font-size="11">{esc(human_bytes(top))}</text>',
             f'<text x="{PAD_L - 6}" y="{H - PAD_B}" text-anchor="end" font-size="11">0</text>',
             f'<text x="{W - 8}" y="{H - 6}" text-anchor="end" font-size="11">'
             + ("time: the timeline\'s range" if timed else f"event order (seq {lo}…{hi})") + "</text>",
             f'<clipPath id="mem-clip"><rect id="mem-clip-rect" x="{PAD_L}" y="0" width="{W - PAD_L}" height="{H}"/></clipPath>',
             f'<line id="mem-cursor" x1="0" x2="0" y1="{PAD_T}" y2="{H - PAD_B}" stroke="#c98c00" visibility="hidden"/>']
    legend = []
    for i, d in enumerate(mem.devices):
        color = COLORS[i % len(COLORS)]
        m = timed.get(d.device)
        drawn = list(zip(m["t"], m["bytes"])) if m else buckets(d.series, lo, hi)
        pts, prev = [f"{x(0 if m else lo):.1f},{y(0):.1f}"], 0
        for at, nbytes in drawn:
            pts.append(f"{x(at):.1f},{y(prev):.1f}")  # a step: the level holds until the event
            pts.append(f"{x(at):.1f},{y(nbytes):.1f}")
            prev = nbytes
        pts.append(f"{x(span if m else hi):.1f},{y(prev):.1f}")
        dev = esc(d.device)
        parts.append(f'<polyline class="mem-series" data-device="{dev}" data-peak="{d.peak_bytes}" '
                     f'data-end="{d.end_bytes}" fill="none" stroke="{color}" stroke-width="1.5" '
                     f'clip-path="url(#mem-clip)" points="{" ".join(pts)}"/>')
        peak_x = x(m["peak_t"]) if m else x(d.peak_seq)
        holders = "; ".join(f"{site_name(h.file, h.line)} {human_bytes(h.bytes)}" for h in d.at_peak[:5])
        parts.append(f'<circle class="mem-peak" data-device="{dev}" data-bytes="{d.peak_bytes}" '
                     f'data-seq="{d.peak_seq}" data-t-ns="{m["peak_t"] if m else ""}" cx="{peak_x:.1f}" cy="{y(d.peak_bytes):.1f}" r="4" '
                     f'fill="{color}"><title>{dev} peak {esc(human_bytes(d.peak_bytes))} at seq {d.peak_seq}: '
                     f'{esc(holders)}</title></circle>')
        legend.append(f'<li data-device="{dev}"><span style="color:{color}">■</span> {dev}: peak '
                      f'{esc(human_bytes(d.peak_bytes))} ({esc(holders) or "nothing tracked"}), at exit '
                      f'{esc(human_bytes(d.end_bytes))}</li>')
    parts.append("</svg>")
    note = ("Live jax.Arrays per device, " + ("on the timeline's time axis (it follows the timeline's zoom); "
            "click the chart for the lines holding the bytes at that moment" if timed else "by event order")
            + "; a dot marks each device's peak (hover it for the lines holding the bytes). XLA temporaries "
            "inside compiled programs are not counted.")
    holders = ('<div id="memory-holders" class="note" data-t-ns="">click the chart: the lines holding each '
               "device's bytes at that moment</div>" if timed else "")
    return (f'<section id="memory"><h2>Device memory</h2><p class="note">{note}</p>{"".join(parts)}{holders}'
            f'<ul class="memory-legend">{"".join(legend)}</ul></section>')
