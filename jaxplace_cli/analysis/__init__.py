"""Analyses: pure functions from a recorded run (or a foreign trace) to results.

``audit_run`` is the facade the CLI uses: summary + findings in one ``AuditResult``.
Renderers (``report/``) only ever see an ``AuditResult``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .findings import Finding, RuleConfig, run_rules
from .run import RunData
from .steps import KindStepStats, StepInfo, detect_steps, per_step_transfers
from .summary import Summary, summarize


@dataclass
class AuditResult:
    source: str  # "run" | "trace"
    path: str
    manifest: dict
    summary: Summary
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    steps: StepInfo | None = None
    step_transfers: dict[str, KindStepStats] = field(default_factory=dict)


def audit_run(run: RunData, cfg: RuleConfig, select=None, ignore=None, top_sites: int = 20) -> AuditResult:
    notes = []
    status = run.manifest.get("status")
    if status == "running":
        notes.append("the run is incomplete: the recording process ended without finalising "
                     "(killed?); events up to its last flush are shown")
    elif status in ("failed", "interrupted", "terminated"):
        notes.append(f"the script ended with status {status} (exit code "
                     f"{run.manifest.get('exit_code')}): {run.manifest.get('error', '')}".rstrip(": "))
    lost = run.manifest.get("events", {}).get("lost_rows", 0)
    if lost:
        notes.append(f"{lost} events could not be written during the run "
                     f"({run.manifest['events'].get('write_error', '')}); totals are lower bounds")
    for h in run.manifest.get("hooks", {}).get("unavailable", []):
        notes.append(f"hook unavailable on this JAX version, not recorded: {h}")
    summary = summarize(run, cfg.min_bytes, top_sites=top_sites)
    findings = run_rules(run, cfg, select, ignore)
    steps = detect_steps(run)
    step_transfers = per_step_transfers(run, steps, cfg.min_bytes)
    return AuditResult("run", str(run.path), run.manifest, summary, findings, notes, steps, step_transfers)
