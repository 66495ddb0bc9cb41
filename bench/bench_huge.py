"""P8 (issue 18): ``jaxplace audit`` of a 10M-event run, and P3's memory at that length.

One plain run and one ``jaxplace run`` (default settings) of ``many_events.py --events
10000000``, then ``audit --format json`` of the recorded run ``p8_audit_runs`` times: wall and
peak RSS of each audit, and the recording's peak RSS over plain (P3 "flat to 10M": the
overhead at 10M may exceed the one at 1M by no more than FLAT_TOLERANCE_MB).
Called by run_bench.py (``--only P8``); the run directory is removed afterwards.
"""
from __future__ import annotations

import shutil
from pathlib import Path


def huge_group(bench, run_child, child_env, median, last_line, py: str) -> dict:
    s = bench.sizes
    args = ["--events", str(s.events_huge), "--threads", str(s.threads), "--wide", str(s.wide)]
    plain = bench.run_config("plain", "many_events.py", args)
    rec = bench.run_config("jaxplace", "many_events.py", args, keep=True)
    run_dir = rec.get("run_dir")
    out = {"args": args, "plain_rss_mb": plain["rss_mb"] if plain["exit_code"] == 0 else None,
           "jaxplace_rss_mb": rec["rss_mb"] if rec["exit_code"] == 0 else None,
           "loop_s": (rec.get("result") or {}).get("loop_s"),
           "events": (rec.get("run") or {}).get("events_total"),
           "backpressure": {k: ((rec.get("run") or {}).get("events") or {}).get(k)
                            for k in ("backpressure_waits", "backpressure_s", "lost_rows")},
           "audits": [], "error": ""}
    if out["plain_rss_mb"] is not None and out["jaxplace_rss_mb"] is not None:
        out["overhead_mb"] = out["jaxplace_rss_mb"] - out["plain_rss_mb"]
    if not run_dir or not Path(run_dir, "events.sqlite").is_file():
        out["error"] = "the 10M-event recording failed: " + last_line(rec.get("stderr_tail", ""))
        return out
    try:
        for _ in range(s.p8_audit_runs):
            r = run_child([py, "-m", "jaxplace_cli", "audit", run_dir, "--format", "json"], child_env(),
                          bench.timeout, bench.tmp)
            ok = r["exit_code"] in (0, 1)
            bench.log(f"  audit {out['events'] or 0:,}-event run {r['wall_s']:7.2f} s {r['rss_mb']:7.0f} MB"
                      + ("" if ok else f"  FAILED: {last_line(r['stderr_tail'])}"))
            out["audits"].append({"ok": ok, "wall_s": r["wall_s"], "rss_mb": r["rss_mb"],
                                  "error": "" if ok else last_line(r["stderr_tail"])})
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    good = [a for a in out["audits"] if a["ok"]]
    out["median_wall_s"] = median([a["wall_s"] for a in good])
    out["median_rss_mb"] = median([a["rss_mb"] for a in good])
    if not good:
        out["error"] = out["audits"][-1]["error"] if out["audits"] else "no audit ran"
    return out
