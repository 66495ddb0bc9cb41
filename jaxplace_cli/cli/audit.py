"""`jaxplace audit`: report transfers, sites, ops per device, findings — and, with a budget,
a CI verdict (exit 1 on a breach)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

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
    stacks: bool = typer.Option(False, "--stacks",
                                help="Also print the bytes transferred by call stack, as an indented tree "
                                     "(a run, terminal formats)."),
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
                      recompile_threshold, run_name, budget, flags, max_findings=max_findings, verbose=verbose,
                      stacks=stacks)
    raise typer.Exit(code)


def load_gate_budget(budget_path: Optional[Path], flags: dict):
    """The budget from a file and/or flags, validated (BudgetError: one line, exit 2); None if none."""
    from jaxplace_cli.analysis.budgets import load_budget, merge_flags

    if budget_path is None and not flags:
        return None
    b = load_budget(budget_path) if budget_path is not None else None
    return merge_flags(b, flags)


def audit_path(path, format=None, output=None, min_bytes="1KiB", top=20, rule=None, ignore=None,
               loop_threshold=3, recompile_threshold=2, run_name=None, budget_path=None, flags=None,
               max_findings=None, verbose=False, stacks=False) -> int:
    """Audit ``path`` and render it; returns the exit code (0, or 1 on a budget breach)."""
    from jaxplace_cli.analysis.audit import Audit
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.cli.common import check_rules, parse_min_bytes
    from jaxplace_cli.cli.report import BIG_RUN, stages
    from jaxplace_cli.report import pick_format
    from jaxplace_cli.report.base import Options
    from jaxplace_cli.suggest.top import attach_suggestion

    fmt = pick_format("audit", format, output, "rich" if sys.stdout.isatty() else "text")
    min_b = parse_min_bytes(min_bytes)
    check_rules(rule, ignore)
    gate = load_gate_budget(budget_path, flags or {})
    cfg = RuleConfig(min_bytes=min_b, loop_threshold=loop_threshold, recompile_threshold=recompile_threshold)
    audit = Audit(path, cfg, select=rule, ignore=ignore, top_sites=top, trace_run=run_name,
                  suggest=attach_suggestion)
    with stages(sys.stderr.isatty() and audit.size() > BIG_RUN) as stage:  # a big run: a progress line
        stage("auditing the run")
        result = audit.judge(gate) if gate is not None else audit.result()
        if fmt == "html":  # the page draws the run's timeline
            stage("building the timeline")
            from jaxplace_cli.cli.report import job_timeline

            timeline = audit.timeline() if audit.kind != "job" else job_timeline(audit)
    page = {"timeline": timeline, "sources": audit.sources()} if fmt == "html" else {}
    options = Options(max_findings=max_findings, verbose=verbose, **page)
    trees = _stacks(audit, fmt, output) if stacks else []
    _emit(result, fmt, output, options)
    if trees:
        from jaxplace_cli.report.terminal import render_stacks

        for label, tree in trees:
            sys.stdout.write("\n" + render_stacks(tree, label))
    return EXIT_BREACH if result.budget is not None and not result.budget.passed else 0


def _stacks(audit, fmt: str, output: Optional[Path]) -> list:
    """``--stacks``: the call-stack trees printed after the terminal report (report/terminal.py),
    one for a run, one per process of a job."""
    from jaxplace_cli.model.errors import UsageError

    if fmt not in ("rich", "text") or output is not None:
        raise UsageError("--stacks adds to the terminal report: drop --output and use --format rich or text")
    trees = audit.stacks_by_process()
    if not trees:
        raise UsageError(f"--stacks reads a jaxplace run or job; {audit.path} is a {audit.kind}")
    return trees


def _emit(result, fmt: str, output: Optional[Path], options) -> None:
    from jaxplace_cli.report import write_atomic
    from jaxplace_cli.report.base import renderer
    from jaxplace_cli.report.budget import verdict_lines

    text = renderer("audit", fmt).render(result, options)
    if output is None:
        sys.stdout.write(text)
        if fmt not in ("rich", "text", "github"):  # the verdict always reaches the CI log
            for line in verdict_lines(result.budget):
                print(line, file=sys.stderr)
        return
    write_atomic(output, text)
    for line in verdict_lines(result.budget):
        print(line, file=sys.stderr)
