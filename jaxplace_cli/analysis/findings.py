"""Findings: the rule registry and ``run_rules``. The rules live in ``analysis/rules/``.

Every finding names the user's file:line (when the source can know it), what it costs
(count, bytes, time) and how to fix it. Rules over a jaxplace run need what only a run
records (user sites, buffer identities, compile signatures); a foreign trace supports only
some of them — ``NEEDS_RUN`` says why the others cannot run there (analysis/trace_audit.py).
"""
from __future__ import annotations

from jaxplace_cli.analysis.rules.balance import idle_device, imbalance
from jaxplace_cli.analysis.rules.base import ERROR, INFO, SEVERITIES, WARNING, Finding, RuleConfig
from jaxplace_cli.analysis.rules.fwd_bwd import fwd_bwd_split
from jaxplace_cli.analysis.rules.incompatible import incompatible_devices
from jaxplace_cli.analysis.rules.pingpong import pingpong
from jaxplace_cli.analysis.rules.placement import policy_fallback
from jaxplace_cli.analysis.rules.recompile import recompile
from jaxplace_cli.analysis.rules.transfers import host_sync_in_loop, implicit_h2d_in_loop, uncommitted_copy


def host_offload(run, cfg) -> list[Finding]:
    """XLA host-offload copies are compiled into the program and visible only in a profiler
    trace (``copy-start`` to/from memory space S(5)); a jaxplace run's own events never hold
    them, so on a run this rule finds nothing. See analysis/trace_audit.py."""
    return []


RULES = {
    "pingpong": pingpong,
    "host-sync-in-loop": host_sync_in_loop,
    "implicit-h2d-in-loop": implicit_h2d_in_loop,
    "uncommitted-copy": uncommitted_copy,
    "incompatible-devices": incompatible_devices,
    "fwd-bwd-split": fwd_bwd_split,
    "recompile": recompile,
    "imbalance": imbalance,
    "idle-device": idle_device,
    "host-offload": host_offload,
    "policy-fallback": policy_fallback,
}

# Rules a foreign trace cannot support, and what they need that only `jaxplace run` records.
NEEDS_RUN = {
    "pingpong": "buffer identities along the data flow",
    "host-sync-in-loop": "the user's source line of each device-to-host read",
    "implicit-h2d-in-loop": "which uploads were implicit (numpy arguments) and their lines",
    "uncommitted-copy": "buffer identities and committed/uncommitted state",
    "incompatible-devices": "the failing call and its arguments' origins",
    "fwd-bwd-split": "forward/backward ops linked by buffer identities",
    "recompile": "compile events with call signatures",
    "policy-fallback": "a placement policy applied by jaxplace",
}


def selected(select: list[str] | None = None, ignore: list[str] | None = None) -> list[str]:
    """Rule ids to run, in registry order: ``--rule`` (all if none) minus ``--ignore``."""
    return [r for r in RULES if (not select or r in select) and r not in (ignore or [])]


def sort_findings(findings: list[Finding]) -> list[Finding]:
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (order[f.severity], -f.bytes, -f.count))


def run_rules(run, cfg: RuleConfig, select: list[str] | None = None,
              ignore: list[str] | None = None) -> list[Finding]:
    findings = []
    for name in selected(select, ignore):
        findings.extend(RULES[name](run, cfg))
    return sort_findings(findings)


__all__ = ["ERROR", "INFO", "NEEDS_RUN", "RULES", "SEVERITIES", "WARNING", "Finding",
           "RuleConfig", "run_rules", "selected", "sort_findings", "fwd_bwd_split",
           "host_offload", "host_sync_in_loop", "idle_device", "imbalance",
           "implicit_h2d_in_loop", "incompatible_devices", "pingpong", "recompile",
           "uncommitted_copy"]
