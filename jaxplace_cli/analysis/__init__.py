"""Analyses: pure functions from a recorded run (or a foreign trace) to results.

``audit_run``: summary + findings of one run in one ``AuditResult``. Commands do not call it
themselves: ``analysis.audit.Audit`` is the one entry point (a run, a trace or a job).
Renderers (``report/``) only ever see an ``AuditResult``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from jaxplace_cli.analysis.findings import MEMORY_RULES, Finding, RuleConfig, run_rules, selected
from jaxplace_cli.analysis.rules.memory import report_of
from jaxplace_cli.analysis.rules.placement import placement_notes
from jaxplace_cli.analysis.rules.window import trace_window_notes
from jaxplace_cli.analysis.run import RunData
from jaxplace_cli.analysis.steps import KindStepStats, StepInfo, per_step_transfers
from jaxplace_cli.analysis.summary import Summary, summarize
from jaxplace_cli.model.manifest import Manifest
from jaxplace_cli.store.site_text import site_texts

# Rules a jaxplace run cannot support, and why (the trace-only counterpart of NEEDS_RUN).
NEEDS_TRACE = {
    "host-offload": "XLA host-offload copies are compiled into the program and only a "
                    "profiler trace shows them (audit the run's plugins/profile dir)",
}


@dataclass
class HostSummary:
    """One host's share of a foreign trace (one ``<host>.xplane.pb``)."""

    host: str
    path: str
    summary: Summary
    source: str = ""  # what the reader recognised in the file, in words
    notes: list[str] = field(default_factory=list)
    step_count: int | None = None  # events on the trace's 'Steps' line; None without one


@dataclass
class TraceInput:
    """Which profiling run of a log dir was audited, and what else was there."""

    run: str | None  # None: a single file or a dir of bare .xplane.pb files
    runs: list[str] = field(default_factory=list)  # every run in the log dir, oldest first
    files: list[str] = field(default_factory=list)


@dataclass
class AuditResult:
    source: str  # "run" | "trace"
    path: str
    manifest: Manifest | None  # None for a foreign trace
    summary: Summary  # for a multi-host trace: all hosts merged (devices named host/device)
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    steps: StepInfo | None = None
    step_transfers: dict[str, KindStepStats] = field(default_factory=dict)
    hosts: list[HostSummary] = field(default_factory=list)  # traces: one per host file
    rules_checked: list[str] = field(default_factory=list)
    rules_unsupported: dict[str, str] = field(default_factory=dict)  # rule -> what it needs
    trace: TraceInput | None = None
    budget: BudgetVerdict | None = None  # set when a budget was checked
    suggestion: object | None = None  # suggest.top.Suggestion: the best transfer-saving change
    distributed: object | None = None  # distributed.JobView: a jax.distributed job's processes
    site_texts: dict = field(default_factory=dict)  # (file, line) -> source text (diff's identity)
    memory: object | None = None  # memory.MemoryReport; None for a run recorded before issue 27


@dataclass
class BudgetVerdict:
    """What a budget check found: the limits checked and the breaches (budgets.py)."""

    source: str
    limits: list[str]
    breaches: list  # budget.Breach

    @property
    def passed(self) -> bool:
        return not self.breaches


def audit_run(run: RunData, cfg: RuleConfig, select=None, ignore=None, top_sites: int = 20) -> AuditResult:
    """Summary, findings and steps of a run. The suggestion section is the suggest stage's
    (``suggest.top.attach_suggestion``), added by the command that wants it."""
    notes = []
    m = run.manifest
    status = m.status
    if status == "running":
        notes.append("the run is incomplete: the recording process ended without finalising "
                     "(killed?); events up to its last flush are shown")
    elif status in ("failed", "interrupted", "terminated"):
        notes.append(f"the script ended with status {status} (exit code "
                     f"{m.exit_code}): {m.error}".rstrip(": "))
    lost = m.events.lost_rows
    if lost:
        notes.append(f"{lost} events could not be written during the run "
                     f"({m.events.write_error}); totals are lower bounds")
    if m.record == "transfers":
        notes.append("recorded with --record transfers: eager jax.numpy ops and Array operators were "
                     "not hooked, so they are not in the op counts, the uploads of their Python-scalar "
                     "operands are not counted, and device memory is not reported (the arrays they "
                     "made were not tracked)")
    for h in m.hooks.unavailable:
        notes.append(f"hook unavailable on this JAX version, not recorded: {h}")
    notes.extend(placement_notes(run))
    notes.extend(trace_window_notes(run))
    notes.extend(child_run_notes(run))
    summary = summarize(run, cfg.min_bytes, top_sites=top_sites)
    findings = run_rules(run, cfg, select, ignore)
    memory, steps = report_of(run)  # the steps, computed once for the memory rules and here
    step_transfers = per_step_transfers(run, steps)
    chosen = [r for r in selected(select, ignore) if (memory is not None or r not in MEMORY_RULES)
              and (getattr(run.store, "has_host_puts", False) or r != "repeated-put")]  # older runs: as they were
    return AuditResult("run", str(run.path), run.manifest, summary, findings, notes, steps,
                       step_transfers,
                       rules_checked=[r for r in chosen if r not in NEEDS_TRACE],
                       rules_unsupported={r: w for r, w in NEEDS_TRACE.items() if r in chosen},
                       site_texts=site_texts(run.store), memory=memory)


def child_run_notes(run: RunData) -> list[str]:
    """Child processes recorded with --follow-children: each is a run of its own."""
    from jaxplace_cli.store.layout import CHILDREN, RunDirError, read_manifest

    root = run.path / CHILDREN
    try:
        dirs = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.name) if root.is_dir() else []
    except OSError:
        return []
    notes = []
    for d in dirs[:20]:
        try:
            m = read_manifest(d)
        except RunDirError:
            notes.append(f"child process run {d} is unreadable")
            continue
        argv = " ".join(m.argv)[:80]
        notes.append(f"child process {d.name} ({argv}; {m.status}): {m.events.ops} ops, "
                     f"{m.events.transfers} transfers; audit it with: jaxplace audit {d}")
    if len(dirs) > 20:
        notes.append(f"... and {len(dirs) - 20} more child process runs in {root}")
    return notes
