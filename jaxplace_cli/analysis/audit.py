"""The one audit entry point: what a path holds, audited once, for every command.

``Audit(path, cfg)`` (as HTA's ``TraceAnalysis``: one object per input) recognises a jaxplace
run, a ``jax.profiler`` trace or a ``jax.distributed`` job directory (``jaxplace launch``),
and hands out what the commands and renderers need: the ``AuditResult``, the timeline, the
audit document, a budget verdict. Each is computed once and kept. ``audit``, ``report``,
``export``, ``view``, ``diff`` and the IPython magic all start here; renderers (``report/``)
get results and never open a run themselves.

Every failure a user's input explains leaves as one ``JaxplaceError``: what cannot be read is
``InputError``; a store damaged past its header is the store's one ``StoreError``
(``store.reader.reading``); values an analysis trips on are named by ``analyse``.

The audit's suggestion section is the suggest stage's (``suggest.top.attach_suggestion``),
which this stage may not import: a command that wants it passes it as ``suggest``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from jaxplace_cli.analysis import AuditResult, BudgetVerdict, audit_run
from jaxplace_cli.analysis.findings import RuleConfig
from jaxplace_cli.analysis.run import InputError, RunData, analyse, classify_input, open_run
from jaxplace_cli.store.layout import is_job_dir
from jaxplace_cli.store.reader import reading

RUN, TRACE, JOB = "run", "trace", "job"


def kind_of(path) -> str:
    """``job`` | ``run`` | ``trace``; InputError (one line) when the path is none of them."""
    return JOB if is_job_dir(Path(path)) else classify_input(path)


class Audit:
    """One input, audited. ``select``/``ignore``: rules; ``top_sites``: transfer sites listed;
    ``trace_run``: which profiling run of a log dir (default: the newest); ``suggest``:
    ``fn(result, run, min_bytes) -> result``, the suggestion section of a run's audit."""

    def __init__(self, path, cfg: RuleConfig | None = None, *, select=None, ignore=None,
                 top_sites: int = 20, trace_run: str | None = None,
                 suggest: Callable | None = None):
        self.path = Path(path)
        self.cfg = cfg or RuleConfig()
        self.select, self.ignore, self.top_sites = select, ignore, top_sites
        self.trace_run, self.suggest = trace_run, suggest
        self.kind = kind_of(self.path)
        self._run: RunData | None = None
        self._result: AuditResult | None = None

    @property
    def run(self) -> RunData | None:
        """The opened run (a run only; None for a trace or a job)."""
        if self._run is None and self.kind == RUN:
            self._run = open_run(self.path)
        return self._run

    def _guarded(self, fn):
        """``fn()`` with the run's data errors and SQLite errors made one line each."""
        with reading(self.path):
            return analyse(self.run, fn) if self.kind == RUN else fn()

    def result(self) -> AuditResult:
        """The audit: summary, findings, steps (and for a job its processes merged)."""
        if self._result is None:
            self._result = self._guarded(self._audit)
        return self._result

    def _audit(self) -> AuditResult:
        if self.kind == JOB:
            from jaxplace_cli.analysis.distributed import audit_job

            return audit_job(self.path, self.cfg, self.select, self.ignore, top_sites=self.top_sites)
        if self.kind == TRACE:
            from jaxplace_cli.analysis.trace_audit import audit_trace

            return audit_trace(self.path, self.cfg, top_sites=self.top_sites, run=self.trace_run,
                               select=self.select, ignore=self.ignore)
        result = audit_run(self.run, self.cfg, self.select, self.ignore, top_sites=self.top_sites)
        return self.suggest(result, self.run, self.cfg.min_bytes) if self.suggest else result

    def size(self) -> int:
        """Ops + transfers recorded (a run; 0 otherwise): how big a progress display is worth."""
        if self.kind != RUN:
            return 0
        return self._guarded(lambda: self.run.store.count("ops") + self.run.store.count("transfers"))

    def timeline(self, detail_max: float | None = None):
        """The run's ``analysis.timeline.Timeline`` (None for a trace or a job: a trace's own
        viewer draws it, a job's is per process: ``timelines``)."""
        if self.kind != RUN:
            return None
        from jaxplace_cli.analysis.timeline import DETAIL_MAX, build_timeline

        result = self.result()
        limit = DETAIL_MAX if detail_max is None else detail_max
        tl = self._guarded(lambda: build_timeline(self.run, result, detail_max=limit))
        tl.stacks = self.stacks()  # the page's #bytes-by-stack (report/html_stacks.py)
        return tl

    def timelines(self, detail_max: float | None = None) -> list[tuple[str, AuditResult, object]]:
        """``(label, result, timeline)`` per run: one for a run (label ``""``), one per readable
        process of a job (``p<i>``, with that process's own audit), none for a trace."""
        if self.kind == RUN:
            return [("", self.result(), self.timeline(detail_max))]
        if self.kind == TRACE:
            return []
        out = []
        for v in self.result().distributed.processes:
            if v.result is None:
                continue
            part = Audit(v.path, self.cfg, select=self.select, ignore=self.ignore, top_sites=10_000)
            part._result = v.result
            out.append((f"p{v.index}", v.result, part.timeline(detail_max)))
        return out

    def stacks(self, max_frames: int | None = None):
        """Bytes by call stack (``analysis.stacks.StackTree``) of a run; None for a trace or a job."""
        if self.kind != RUN:
            return None
        from jaxplace_cli.analysis.stacks import MAX_FRAMES, stack_tree, steady_window

        cap = MAX_FRAMES if max_frames is None else max_frames
        steady = steady_window(self.result().steps)
        return self._guarded(lambda: stack_tree(self.run.store, self.run.store.sites(), cap, steady))

    def stacks_by_process(self, max_frames: int | None = None) -> list[tuple[str, object]]:
        """``(label, StackTree)`` per run, as ``timelines``: one for a run (label ``""``), one
        per readable process of a job (``p<i>``), none for a trace."""
        if self.kind == RUN:
            return [("", self.stacks(max_frames))]
        if self.kind == TRACE:
            return []
        out = []
        for v in self.result().distributed.processes:
            if v.result is not None:
                part = Audit(v.path, self.cfg, select=self.select, ignore=self.ignore, top_sites=10_000)
                part._result = v.result
                out.append((f"p{v.index}", part.stacks(max_frames)))
        return out

    def sources(self) -> dict:
        """(file, line) -> the source line of each top site, finding and related site, read
        now (``analysis.timeline.source_lines``: regular .py files only)."""
        from jaxplace_cli.analysis.timeline import source_lines

        result = self.result()
        locs = {(t.file, t.line) for t in result.summary.sites}
        for f in result.findings:
            locs.add((f.file, f.line))
            locs.update((r.get("file"), r.get("line")) for r in f.related[:8] if isinstance(r, dict))
        return source_lines(locs)

    def document(self) -> dict:
        """The audit as its documented JSON document (analysis/document.py)."""
        from jaxplace_cli.analysis.document import to_dict

        return to_dict(self.result())

    def judge(self, gate, min_bytes: int | None = None) -> AuditResult:
        """Check a budget (``analysis.budgets.Budget``): sets and returns ``result().budget``.
        A job is checked per process and in total; a trace cannot be (no sites, steps, lineage)."""
        from jaxplace_cli.analysis.budgets import check

        if self.kind == TRACE:
            raise InputError("budgets need a jaxplace run (sites, steps, lineage); audit the run directory")
        result = self.result()
        mb = self.cfg.min_bytes if min_bytes is None else min_bytes
        if self.kind == JOB:
            from jaxplace_cli.analysis.budget_total import total_breaches
            from jaxplace_cli.analysis.distributed import job_verdict

            result.budget = self._guarded(lambda: job_verdict(result, gate, mb, check, total_breaches))
        else:
            result.budget = BudgetVerdict(gate.source, gate.limit_names(),
                                          self._guarded(lambda: check(result, self.run, gate, mb)))
        return result

    def close(self) -> None:
        if self._run is not None:
            self._run.store.close()
