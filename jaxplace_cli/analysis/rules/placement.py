"""What a placement policy did: fallbacks become findings, substitutions become notes.

The placer records a ``policy-fallback`` marker each time ``--on-policy-error fallback`` let
JAX decide instead (e.g. a rule names ``gpu:0`` on a machine without a GPU), and a
``policy-note`` marker when a device alias resolved to a stand-in.
"""
from __future__ import annotations

import re
from collections import Counter

from jaxplace_cli.analysis.rules.base import WARNING, Finding, RuleConfig
from jaxplace_cli.model.paths import site_name

_SITE = re.compile(r" at (?P<file>.+):(?P<line>\d+): ")
_OP = re.compile(r"failed for op (?P<op>\S+)")


def policy_fallback(run, cfg: RuleConfig) -> list[Finding]:
    """Ops the policy could not place, grouped by site and reason."""
    rows = run.store.conn.execute("SELECT value FROM markers WHERE kind = 'policy-fallback' ORDER BY seq")
    groups: Counter = Counter(str(value) for (value,) in rows)
    out = []
    for message, n in groups.most_common():
        m = _SITE.search(message)
        op = _OP.search(message)
        file, line = (m.group("file"), int(m.group("line"))) if m else ("", 0)
        reason = (message.partition(": ")[2] or message) if m is None else message[m.end():]
        out.append(Finding(
            "policy-fallback", WARNING,
            f"the policy could not place {op.group('op') if op else 'an op'} {n} time(s) at "
            f"{site_name(file, line)}, so JAX decided: {reason}",
            file, line, n, 0,
            fix="name a device that exists here (an [aliases] entry gives stand-ins, e.g. "
                "accel = [\"gpu:0\", \"cpu:1\"]), or restrict --devices"))
    return out


def placement_notes(run) -> list[str]:
    """One note per distinct policy substitution, plus a one-line summary of the placement."""
    notes = [f"placement: {value}" for (value,) in run.store.conn.execute(
        "SELECT DISTINCT value FROM markers WHERE kind = 'policy-note' ORDER BY value")]
    placement = run.manifest.placement
    if placement:
        placed = run.store.conn.execute("SELECT COUNT(*) FROM ops WHERE placed != '' AND placed != 'fallback'").fetchone()[0]
        moves = run.store.conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM transfers WHERE api LIKE '%moved by policy%'").fetchone()
        notes.insert(0, f"placement: policy {placement.policy} placed {placed} ops "
                        f"(granularity {placement.granularity}); its moves: {moves[0]} "
                        f"transfers, {moves[1]} bytes; fallbacks: {placement.fallbacks}")
    return notes
