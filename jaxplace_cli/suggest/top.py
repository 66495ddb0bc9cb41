"""The one-line suggestion the audit report shows: the placement change that saves the most
device-to-device traffic, and what it saves.

First a policy-only change is sought (explicit ``device_put`` targets stay as written); when
that saves nothing, one that also changes ``device_put`` targets — which the user applies in
the script, so the suggestion says so.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from jaxplace_cli.model.events import D2D
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.suggest.model import TRANSFERS
from jaxplace_cli.suggest.plan import Plan, make_plan


@dataclass
class Suggestion:
    summary: str  # "pin multiply+device_put at pingpong_eager.py:24-25 to cpu:1: -8.0 MiB d2d, -8 ping-pong returns"
    device: str
    ops: list
    site: str  # "pingpong_eager.py:24-25"
    saved_bytes: int  # device-to-device bytes saved per run
    saved_transfers: int
    saved_round_trips: int
    needs_code_change: bool  # device_put targets must change in the script
    policy: str  # the rules file text (empty when a policy cannot express it)


def top_suggestion(run, min_bytes: int = 1024) -> Suggestion | None:
    """The best transfer-saving placement change for ``run`` (an ``analysis.run.RunData``),
    or None when nothing saves at least ``min_bytes``. Never raises: an audit must not fail
    because no suggestion could be made."""
    try:
        for retarget in (False, True):
            plan = make_plan(run, TRANSFERS, retarget_puts=retarget, memory=False)  # the audit has its own
            saved = plan.baseline.bytes(D2D) - plan.predicted.bytes(D2D)
            if saved >= max(min_bytes, 1):
                return describe(plan)
    except Exception:  # noqa: BLE001 - see docstring
        return None
    return None


def describe(plan: Plan) -> Suggestion:
    rg = plan.rg
    a = plan.solution.assign
    moved = [v for v in plan.moved.tolist() if rg.nodes[v].placeable]
    by_dev = Counter(int(a[v]) for v in moved)
    dev = min(by_dev, key=lambda d: (-by_dev[d], d)) if by_dev else int(a[0]) if len(a) else 0
    mine = [v for v in moved if int(a[v]) == dev]
    names = list(dict.fromkeys(rg.nodes[v].name for v in mine))
    files = Counter(rg.nodes[v].file for v in mine)
    file = min(files, key=lambda f: (-files[f], f)) if files else ""
    lines = sorted({rg.nodes[v].line for v in mine if rg.nodes[v].file == file})
    site = f"{os.path.basename(file)}:{lines[0]}" + (f"-{lines[-1]}" if len(lines) > 1 and lines[-1] != lines[0] else "") if lines else "?"
    saved = plan.baseline.bytes(D2D) - plan.predicted.bytes(D2D)
    saved_n = plan.baseline.count(D2D) - plan.predicted.count(D2D)
    trips = plan.baseline.round_trips - plan.predicted.round_trips
    device = rg.graph.devices[dev]
    verb = "move" if rg.retarget_puts else "pin"
    shown = "+".join(names[:3]) + (f"+{len(names) - 3} more" if len(names) > 3 else "")
    what = f"{verb} {shown or 'ops'} at {site} to {device}"
    if rg.retarget_puts:
        what += " (change the device_put targets in the script)"
    others = len(moved) - len(mine)
    if others:
        what += f" (+{others} more op{'s' if others > 1 else ''} elsewhere)"
    gains = [f"-{human_bytes(saved)} d2d"]
    if trips > 0:
        gains.append(f"-{trips} ping-pong return{'s' if trips != 1 else ''}")
    return Suggestion(f"{what}: {', '.join(gains)}", device, names, site, saved, saved_n, max(trips, 0),
                      rg.retarget_puts, "" if rg.retarget_puts else plan.policy_text)


# Above this many ops the audit leaves the solve to `jaxplace suggest` (which reports its solve
# time): the audit of a 1M-event run must stay within seconds (issue 6, P4).
SUGGEST_MAX_OPS = 50_000


def attach_suggestion(result, run, min_bytes: int):
    """The audit's suggestion section, only where device-to-device bytes exist to be saved;
    sets ``result.suggestion`` or adds a note saying why there is none. Returns ``result``."""
    summary = result.summary
    d2d = summary.totals.get("d2d")
    if d2d is None or d2d.bytes < max(min_bytes, 1):
        return result
    if summary.ops_total > SUGGEST_MAX_OPS:
        result.notes.append(f"no suggestion: {summary.ops_total:,} ops is more than the audit solves inline "
                            f"({SUGGEST_MAX_OPS:,}); run `jaxplace suggest {run.path}`")
        return result
    result.suggestion = top_suggestion(run, min_bytes)
    return result
