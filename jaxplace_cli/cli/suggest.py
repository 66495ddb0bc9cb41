"""`jaxplace suggest`: a placement that moves fewer bytes, the policy file, the prediction,
and (with --verify) the proof by re-running the script."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Optional

import typer

from jaxplace_cli.model.errors import UsageError

EPILOG = """\b
examples:
  jaxplace suggest RUN -o policy.toml         # solve, write it, predict
  jaxplace suggest RUN -o policy.toml --verify train.py --out verify-run
  jaxplace suggest RUN --memory-limit cpu:0=2GiB,cpu:1=4GiB -o policy.toml
"""


def suggest(
    path: Optional[Path] = typer.Argument(None, metavar="RUN", help="A run directory made by `jaxplace run`."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE",
                                          help="Write the policy file (TOML) to FILE; with --graph: the placement "
                                               "as JSON."),
    objective: str = typer.Option("transfers", "--objective", metavar="NAME",
                                  help="transfers (bytes moved), total (compute + transfer time), "
                                       "makespan (simulated run time), throughput (pipeline stages)."),
    devices: Optional[str] = typer.Option(None, "--devices", metavar="SPEC",
                                          help="Devices the suggestion may use: cpu:0,cpu:1 (default: the run's)."),
    balance: Optional[float] = typer.Option(None, "--balance", min=0.0, metavar="B",
                                            help="transfers/total: each device's compute load <= (1 + B) x average."),
    mem_cap: Optional[str] = typer.Option(None, "--mem-cap", metavar="SIZE",
                                          help="Memory per device for the ops' results, e.g. \"8 GiB\"."),
    memory_limit: Optional[str] = typer.Option(
        None, "--memory-limit", metavar="SIZE",
        help="Never suggest a placement whose predicted peak device memory exceeds SIZE on any device "
             "(\"4GiB\"), or per device: cpu:0=4GiB,cpu:1=2GiB (transfers/total)."),
    seed: int = typer.Option(0, "--seed", metavar="N",
                             help="Seed of the heuristic solvers (same input + seed = same policy)."),
    solver: str = typer.Option("auto", "--solver", metavar="NAME",
                               help="auto, mincut, milp, expansion or multilevel (transfers/total)."),
    retarget_puts: bool = typer.Option(False, "--retarget-puts",
                                       help="Also change explicit device_put targets (applied in the script, not by a policy)."),
    verify: Optional[str] = typer.Option(None, "--verify", metavar="SCRIPT",
                                         help="Re-run SCRIPT under the suggested policy and compare predicted with measured."),
    verify_out: Optional[Path] = typer.Option(None, "--out", "--verify-out", metavar="DIR",
                                              help="Run directory for the --verify re-run (default: a temporary one)."),
    graph: Optional[Path] = typer.Option(None, "--graph", metavar="FILE",
                                         help="Solve a placement_graphs JSON file instead of a run."),
    accelerators: Optional[int] = typer.Option(None, "--accelerators", min=1, metavar="N",
                                               help="--graph: number of accelerators (default: the file's maxFPGAs)."),
    no_cpu: bool = typer.Option(False, "--no-cpu", help="--graph: accelerators only (no CPU device)."),
    format: str = typer.Option("text", "--format", "-f", metavar="FORMAT",
                               help="text, json or markdown (markdown: a run's plan, not --graph)."),
) -> None:
    """Suggest a placement for a recorded run: write it as a policy file, predict the transfers
    it will make, and print the commands that verify it (or verify it with --verify)."""
    from jaxplace_cli.suggest.model import OBJECTIVES
    from jaxplace_cli.suggest.solve import SOLVERS

    if format not in ("text", "json", "markdown"):
        raise UsageError(f"--format must be text, json or markdown, not {format!r}")
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if solver not in SOLVERS:
        raise UsageError(f"--solver must be one of {', '.join(SOLVERS)}, not {solver!r}")
    cap = None
    if mem_cap is not None:
        from jaxplace_cli.model.sizes import parse_size

        try:
            cap = parse_size(mem_cap)
        except ValueError as exc:
            raise UsageError(f"--mem-cap: {exc}") from None
    if graph is not None:
        if path is not None:
            raise UsageError("give a run directory or --graph FILE, not both")
        if format == "markdown":
            raise UsageError("--format markdown is for a run's plan; --graph prints text or json")
        if memory_limit is not None:
            raise UsageError("--memory-limit needs a run (the device memory it replays); for --graph use --mem-cap")
        _suggest_graph(graph, objective, accelerators, not no_cpu, seed, balance, solver, cap, output, format)
        return
    if path is None:
        raise UsageError("nothing to suggest for: give a run directory (jaxplace suggest RUN_DIR) or --graph FILE.json")
    _suggest_run(path, output, objective, devices, balance, cap, seed, solver, retarget_puts,
                 verify, verify_out, format, memory_limit)


def _suggest_run(path, output, objective, devices, balance, cap, seed, solver, retarget_puts,
                 verify, verify_out, fmt, memory_limit=None) -> None:
    from jaxplace_cli.analysis.distributed import is_job
    from jaxplace_cli.analysis.run import analyse, open_run
    from jaxplace_cli.report.base import renderer
    from jaxplace_cli.report.suggest_render import PlanReport
    from jaxplace_cli.store.reader import reading
    from jaxplace_cli.suggest.plan import make_plan

    if not Path(path).exists():  # not "not a jaxplace run": there is nothing there at all
        raise UsageError(f"{path} does not exist; pass a run directory made by `jaxplace run`")
    if is_job(path):  # placement is per process: each process places its own ops
        raise UsageError(f"{path} is a jax.distributed job; suggest a placement for one process's run: "
                         f"jaxplace suggest {Path(path) / 'proc-0'}")
    run = open_run(path)
    names = [d.strip() for d in devices.split(",") if d.strip()] if devices else None
    with reading(path):
        no_ops = run.store.count("ops") == 0
    if no_ops:  # a script that never dispatched JAX work: nothing to place (was an IndexError)
        raise UsageError(f"{path} recorded no JAX ops (the script dispatched no JAX work), so there is nothing "
                         "to place; record a run that uses JAX, e.g. jaxplace run train.py")
    policy_path = output if output is not None else (
        Path(tempfile.mkdtemp(prefix="jaxplace-suggest-")) / "policy.toml" if verify is not None else None)
    try:
        with reading(path):
            plan = analyse(run, lambda: make_plan(run, objective, names, seed, balance, cap, retarget_puts, solver,
                                                  str(policy_path) if policy_path is not None else None,
                                                  memory_limit))
    except ValueError as exc:
        raise UsageError(str(exc)) from None  # how the solvers say a request cannot be met (the data is sound)
    if policy_path is not None:
        _write(policy_path, plan.policy_text)
    result = None
    if verify is not None:
        from jaxplace_cli.suggest.verify import verify as replay

        script = str(Path(verify).resolve())  # the user's file, whatever directory the replay runs in
        out_dir = verify_out or Path(tempfile.mkdtemp(prefix="jaxplace-verify-")) / "run"
        result = replay(plan, policy_path, script, out_dir)
    shown = str(policy_path) if policy_path is not None else None
    sys.stdout.write(renderer("suggest", fmt).render(PlanReport(plan, shown, str(path), result)))
    if result is not None and not result.match:
        raise typer.Exit(1)


def _suggest_graph(graph, objective, accelerators, include_cpu, seed, balance, solver, cap, output, fmt) -> None:
    import numpy as np

    from jaxplace_cli.report.base import renderer
    from jaxplace_cli.report.suggest_render import GraphReport
    from jaxplace_cli.suggest.from_json import load_graph_json
    from jaxplace_cli.suggest.solve import solve_graph

    g = load_graph_json(graph, include_cpu=include_cpu, accelerators=accelerators)  # GraphFileError: one line
    if cap is not None:
        g.mem_cap = np.full(g.k, cap, dtype=np.int64)
    try:
        sol = solve_graph(g, objective, seed, balance, solver)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    shown = GraphReport(str(graph), g, sol, objective)
    if output is not None:
        _write(output, renderer("graph", "json").render(shown))
    sys.stdout.write(renderer("graph", fmt).render(shown))


def _write(path: Path, text: str) -> None:
    from jaxplace_cli.report import write_atomic

    write_atomic(Path(path), text)
