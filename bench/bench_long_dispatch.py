"""P12 (issue 24 item 6): a program whose first dispatch runs for seconds, plain python vs
``jaxplace run`` at default settings (trace window on): wall time and peak RSS per pair.

Target ≤ x1.5 wall and ≤ 2x peak RSS: the default trace window must not explode on one long
dispatch (it is placed on the steady state and cut by a watchdog at its deadline)."""
from __future__ import annotations


def long_dispatch_group(bench, median, steps: int) -> dict:
    walls, rss, states, errors = [], [], [], []
    for i in range(bench.sizes.pairs):
        bench.log(f" round {i + 1}")
        plain = bench.run_config("plain", "long_dispatch.py", ["--steps", str(steps)])
        jp = bench.run_config("jaxplace", "long_dispatch.py", ["--steps", str(steps)])
        if plain["exit_code"] != 0 or jp["exit_code"] != 0:
            errors.append(f"exit {plain['exit_code']}/{jp['exit_code']}")
            continue
        walls.append(jp["wall_s"] / plain["wall_s"])
        rss.append(jp["rss_mb"] / plain["rss_mb"] if plain["rss_mb"] else None)
        states.append(((jp.get("run") or {}).get("trace") or {}).get("state"))
    rss = [r for r in rss if r is not None]
    return {"steps": steps, "pair_wall_ratios": [round(w, 3) for w in walls],
            "pair_rss_ratios": [round(r, 3) for r in rss], "median_wall_ratio": median(walls),
            "median_rss_ratio": median(rss), "trace_states": states, "errors": errors}


def long_dispatch_row(row, g, fmt_ratio) -> None:
    if g is None:
        row("P12", "skipped", None)
    elif g["median_wall_ratio"] is None or g["median_rss_ratio"] is None:
        row("P12", "n/a", False, None, "; ".join(g["errors"])[:300])
    else:
        v, m = g["median_wall_ratio"], g["median_rss_ratio"]
        row("P12", f"{fmt_ratio(v)} wall, ×{m:.2f} RSS", v <= 1.5 and m <= 2.0, v,
            f"{g['steps']:,} steps; trace window {','.join(sorted({s or '?' for s in g['trace_states']}))}")
