"""`jaxplace audit`: report transfers, sites, ops per device, findings — and, with a budget,
a CI verdict (exit 1 on a breach)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from jaxplace_cli.cli.common import fail
from jaxplace_cli.cli.limit_flags import given_limits, with_limit_flags

EXIT_BREACH = 1

EPILOG = """\b
examples:
  jaxplace audit jaxplace-runs/train-20261203-101500
  jaxplace audit RUN --budget audits/train.toml -o report.sarif   # CI
  jaxplace audit RUN --rule host-sync-in-loop --verbose
"""


@with_limit_flags  # --max-h2d ... --fail-on: one per budget limit (cli/limit_flags.py)
def audit(
    path: Path = typer.Argument(..., metavar="PATH",
                                help="A jaxplace run directory, a jax.profiler log dir, or a .xplane.pb file."),
    format: Optional[str] = typer.Option(None, "--format", "-f", metavar="FORMAT",
                                         help="rich (default on a terminal), text (default otherwise), json, "
                                              "markdown, junit, sarif, github, html."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE",
                                          help="Write the report to FILE, atomically; its extension picks the "
                                               "format (.json .txt .md .xml .sarif .html) unless --format is given."),
    max_findings: int = typer.Option(3, "--max-findings", min=1, metavar="N",
                                     help="Findings listed per rule in the text/Markdown report; the rest are "
                                          "counted (\"and N more\")."),
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="List every finding and every related site (text/Markdown)."),
    min_bytes: str = typer.Option("1KiB", "--min-bytes", metavar="SIZE",
                                  help="Transfers smaller than this are counted apart (e.g. 0, 1KiB, \"1 MB\")."),
    top: int = typer.Option(20, "--top", min=1, metavar="N", help="How many transfer sites to list."),
    rule: Optional[List[str]] = typer.Option(None, "--rule", metavar="RULE",
                                             help="Only run this rule (repeatable); see docs/audit-json-schema.md."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", metavar="RULE", help="Skip this rule (repeatable)."),
    loop_threshold: int = typer.Option(3, "--loop-threshold", min=2, metavar="N",
                                       help="Repeats at one line that count as 'in a loop'."),
    recompile_threshold: int = typer.Option(2, "--recompile-threshold", min=1, metavar="N",
                                            help="A function compiled more than N times is a finding."),
    run_name: Optional[str] = typer.Option(None, "--run", metavar="NAME",
                                           help="For a jax.profiler log dir: which profiling run (default: the newest)."),
    budget: Optional[Path] = typer.Option(None, "--budget", "-b", metavar="FILE",
                                          help="Budget file (TOML, docs/budgets.md): exit 1 when a limit is exceeded."),
    **limits,
) -> None:
    """Report the verdict, findings by rule, transfers, sites and ops per device of a run.

    With --budget FILE or any --max-* / --fail-on limit, exit 1 when a limit is exceeded, with
    one sentence per breach; a flag overrides the file's value. SIZE: 1048576, "10 MB", 4KiB.
    """
    flags = given_limits(limits)
    code = audit_path(path, format, output, min_bytes, top, rule, ignore, loop_threshold,
                      recompile_threshold, run_name, budget, flags, max_findings=max_findings, verbose=verbose)
    raise typer.Exit(code)


def load_gate_budget(budget_path: Optional[Path], flags: dict):
    """The budget from a file and/or flags, validated (BudgetError -> exit 2); None if none."""
    from jaxplace_cli.analysis.budgets import BudgetError, load_budget, merge_flags

    if budget_path is None and not flags:
        return None
    try:
        b = load_budget(budget_path) if budget_path is not None else None
        return merge_flags(b, flags)
    except BudgetError as exc:
        fail(str(exc))


def audit_path(path, format=None, output=None, min_bytes="1KiB", top=20, rule=None, ignore=None,
               loop_threshold=3, recompile_threshold=2, run_name=None, budget_path=None, flags=None,
               max_findings=None, verbose=False) -> int:
    """Audit ``path`` and render it; returns the exit code (0, or 1 on a budget breach)."""
    import sqlite3

    from jaxplace_cli.analysis import BudgetVerdict, audit_run
    from jaxplace_cli.analysis.findings import RULES, RuleConfig
    from jaxplace_cli.analysis.run import InputError, analyse, classify_input, open_run
    from jaxplace_cli.model.sizes import parse_size
    from jaxplace_cli.report import FORMATS, OutputPathError, format_for
    from jaxplace_cli.store.reader import StoreError

    if format is None and output is not None:
        try:
            format = format_for(output)
        except OutputPathError as exc:
            fail(str(exc))
    fmt = format or ("rich" if sys.stdout.isatty() else "text")
    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}{_did_you_mean(fmt, FORMATS)}")
    try:
        min_b = parse_size(min_bytes)
    except ValueError as exc:
        fail(f"--min-bytes: {exc}")
    from jaxplace_cli.analysis.rules.distributed import JOB_RULES

    for r in (rule or []) + (ignore or []):
        if r not in RULES and r not in JOB_RULES:
            fail(f"unknown rule {r!r}{_did_you_mean(r, [*RULES, *JOB_RULES]) or ''}; rules are: "
                 f"{', '.join([*RULES, *JOB_RULES])}")
    gate = load_gate_budget(budget_path, flags or {})
    cfg = RuleConfig(min_bytes=min_b, loop_threshold=loop_threshold, recompile_threshold=recompile_threshold)
    try:
        from jaxplace_cli.analysis.distributed import audit_job, is_job

        kind = "job" if is_job(path) else classify_input(path)
        if kind == "job":  # a jax.distributed job: its processes merged (analysis/distributed.py)
            result = audit_job(path, cfg, rule, ignore, top_sites=top)
        elif kind == "run":
            run = open_run(path)
            from jaxplace_cli.cli.report import BIG_RUN, stages
            from jaxplace_cli.suggest.top import attach_suggestion

            big = sys.stderr.isatty() and run.store.count("ops") + run.store.count("transfers") > BIG_RUN
            with stages(big) as stage:  # a transient progress line on stderr for a big run
                stage("auditing the run")
                result = analyse(run, lambda: attach_suggestion(audit_run(run, cfg, rule, ignore, top_sites=top),
                                                                run, cfg.min_bytes))
        else:
            from jaxplace_cli.analysis.trace_audit import audit_trace

            if gate is not None:
                fail("budgets need a jaxplace run (sites, steps, lineage); audit the run directory")
            result = audit_trace(path, cfg, top_sites=top, run=run_name, select=rule, ignore=ignore)
    except InputError as exc:
        fail(str(exc))
    except (sqlite3.DatabaseError, StoreError) as exc:  # a store corrupt past its header
        fail(f"{path}: the events store is corrupt or unreadable ({exc}); the run cannot be audited")
    if gate is not None and kind == "job":  # every process, and the job in total
        from jaxplace_cli.analysis.budget_total import total_breaches
        from jaxplace_cli.analysis.budgets import check
        from jaxplace_cli.analysis.distributed import job_verdict

        result.budget = job_verdict(result, gate, min_b, check, total_breaches)
    elif gate is not None:
        from jaxplace_cli.analysis.budgets import check

        result.budget = BudgetVerdict(gate.source, gate.limit_names(), check(result, run, gate, min_b))
    _emit(result, fmt, output, max_findings, verbose)
    return EXIT_BREACH if result.budget is not None and not result.budget.passed else 0


def _did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'pingpong'?)`` for a near miss, else ''."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _emit(result, fmt: str, output: Optional[Path], max_findings=None, verbose=False) -> None:
    from jaxplace_cli.report import render_to_string, write_atomic
    from jaxplace_cli.report.budget import verdict_lines

    text = render_to_string(result, fmt, max_findings=max_findings, verbose=verbose)
    if output is None:
        sys.stdout.write(text)
        if fmt not in ("rich", "text", "github"):  # the verdict always reaches the CI log
            for line in verdict_lines(result.budget):
                print(line, file=sys.stderr)
        return
    try:
        write_atomic(output, text)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
    for line in verdict_lines(result.budget):
        print(line, file=sys.stderr)
