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
from jaxplace_cli.store import queries

_SITE = re.compile(r" at (?P<file>.+):(?P<line>\d+): ")
_OP = re.compile(r"failed for op (?P<op>\S+)")


def policy_fallback(run, cfg: RuleConfig) -> list[Finding]:
    """Ops the policy could not place, grouped by site and reason."""
    groups: Counter = Counter(queries.marker_values(run.store, "policy-fallback"))
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
    notes = [f"placement: {value}" for value in queries.distinct_marker_values(run.store, "policy-note")]
    placement = run.manifest.placement
    if placement:
        placed = queries.count_placed_ops(run.store)
        moves = queries.policy_moves(run.store)
        notes.insert(0, f"placement: policy {placement.policy} placed {placed} ops "
                        f"(granularity {placement.granularity}); its moves: {moves[0]} "
                        f"transfers, {moves[1]} bytes; fallbacks: {placement.fallbacks}")
    return notes
