"""``jaxplace launch -n N``: a ``jax.distributed`` job of N local processes, each recorded.

What users (and the tests) run to simulate a multi-host job on one machine, as ``torchrun``
does for PyTorch. Each process is ``jaxplace run --out JOB ...`` with the environment a
cluster launcher would give it:

* ``JAX_COORDINATOR_ADDRESS`` = ``127.0.0.1:<free port>``, read by JAX itself;
  ``JAX_COORDINATOR_BIND_ADDRESS`` the same (process 0's coordinator listens on loopback only);
* ``JAXPLACE_PROCESS_INDEX`` / ``JAXPLACE_PROCESS_COUNT`` / ``JAXPLACE_LAUNCH_COORDINATOR``:
  where the process records (``JOB/proc-<i>/``, capture/distributed.py) and what
  ``jax.distributed.initialize()`` without arguments finds through JAX's own cluster
  detection (capture/jaxhooks/cluster.py), so scripts written for SLURM or TPU pods run as
  they are;
* ``PYTHONUNBUFFERED=1``: output is read line by line and prefixed (``[p0] ``); a block-buffered
  child would show its lines only when the buffer fills.

The processes run in process groups of their own with stdin from /dev/null (a Ctrl-C at the
terminal reaches launch once, and launch forwards it once to each group, as the terminal
would have). Launch watches the scripts, not only the processes (cli/launch_job.py): each
says on a pipe how its script ended and how many events it has recorded, so a script that
raised is noticed although JAX's shutdown keeps its process alive, and a process that records
nothing for ``--timeout`` seconds is named hung. Then launch stops the others and, after
``--grace`` seconds, kills what is left. ``JOB/job.json`` records every process's exit code or
signal and which process failed first, with its exception line; launch exits with that
process's code (124 for a hung one).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from jaxplace_cli.cli.run import RunUsageError, split
from jaxplace_cli.report.run_lines import say

DESCRIPTION = ("Start a jax.distributed job of N local processes, each recorded by jaxplace run "
               "into one job directory (JOB/proc-<i>/).")
EPILOG = """\
Every `jaxplace run` option (--policy, --trace, --record, ...) applies to each process.
jax.distributed.initialize() with no arguments finds the coordinator (127.0.0.1, a free port),
the process count and this process's index. Output lines are prefixed [p0], [p1], ...
The exit code is the first failing process's (0 when all succeed; 1 when only the budget failed;
124 when a process hung past --timeout).

examples:
  jaxplace launch -n 2 --devices-per-process 2 train.py --steps 10
  jaxplace launch -n 4 --out runs/job --budget audits/job.toml train.py
  jaxplace audit runs/job
"""
LAUNCH_ONLY = ("-n", "--processes", "--devices-per-process", "--grace", "--timeout", "--port", "--out",
               "-b", "--budget")


def build_parser() -> argparse.ArgumentParser:
    from jaxplace_cli.cli.run import _count, _seconds
    from jaxplace_cli.cli.run import build_parser as run_parser

    p = run_parser()
    p.prog, p.description, p.epilog = "jaxplace launch", DESCRIPTION, EPILOG
    for action in p._actions:  # the same options, said for a job
        if action.dest == "out":
            action.help = ("job directory to create (default jaxplace-runs/<script>-<timestamp>/); "
                           "process i records into OUT/proc-<i>/")
        elif action.dest == "budget":
            action.help = ("budget file (TOML, docs/budgets.md): after the job, exit 1 when any "
                           "process, or the job in total ([total]), exceeds a limit")
    p.add_argument("-n", "--processes", type=_count, metavar="N", help="how many processes (>= 1)")
    p.add_argument("--devices-per-process", type=_count, metavar="K",
                   help="simulate K CPU devices in each process (jaxplace run --devices K)")
    p.add_argument("--grace", type=_seconds, default=30.0, metavar="S",
                   help="when a process fails, the others are stopped (SIGINT: each saves its run) "
                        "and killed S seconds later if still running (default: %(default)s)")
    p.add_argument("--timeout", type=_seconds, default=None, metavar="S",
                   help="name a process hung, and stop the job (exit 124), when it records no "
                        "event for S seconds (default, or 0: no limit)")
    p.add_argument("--port", type=_count, metavar="P", help="coordinator port (default: a free one)")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
    """(options, the run options to forward, the script part) of ``jaxplace launch ARGV``."""
    parser = build_parser()
    options, rest = split(parser, list(argv))
    ns = parser.parse_args(options)
    if ns.processes is None or ns.processes < 1:
        raise RunUsageError("launch needs -n N (N >= 1 processes)")
    if ns.devices is not None and ns.devices.strip().isdigit():
        raise RunUsageError("use --devices-per-process K for simulated CPU devices under launch")
    if ns.devices_per_process == 0:
        raise RunUsageError("--devices-per-process needs K >= 1")
    if not rest and ns.module is None:
        raise RunUsageError("nothing to run: give a script (jaxplace launch -n 2 train.py) or -m MODULE")
    return ns, _forwarded(parser, options), rest


def _forwarded(parser, options: list[str]) -> list[str]:
    """The run options, minus launch's own (and their values)."""
    takes_value = {s for a in parser._actions for s in a.option_strings if a.nargs != 0}
    out, i = [], 0
    while i < len(options):
        tok = options[i]
        name = tok.split("=", 1)[0] if tok.startswith("--") else tok[:2]
        width = 2 if tok in takes_value else 1
        if name not in LAUNCH_ONLY:
            out.extend(options[i:i + width])
        i += width
    return out


def main(argv: list[str]) -> None:
    """``jaxplace launch ARGV``; ends in SystemExit with the job's exit code."""
    from jaxplace_cli.capture.runner import ScriptNotFound, resolve_target
    from jaxplace_cli.model.errors import UsageError
    from jaxplace_cli.store.layout import RunDirError, create_run_dir, default_run_dir

    ns, forward, rest = parse(argv)
    script = rest[1] if rest[:1] == ["--"] else (rest[0] if rest and ns.module is None else None)
    if script == "-" and ns.module is None:  # each process would read its own stdin (/dev/null): an empty program
        raise UsageError("launch starts the script in every process: give it as a file, not - (stdin)")
    try:
        _, target = resolve_target(script, ns.module)
    except ScriptNotFound as exc:
        raise UsageError(str(exc)) from None
    gate = None
    if ns.budget is not None:  # a typo in the budget is an error before anything runs
        from jaxplace_cli.cli.audit import load_gate_budget

        gate = load_gate_budget(ns.budget, {})
    try:
        job_dir = create_run_dir(ns.out if ns.out is not None else default_run_dir(target))
    except RunDirError as exc:
        raise UsageError(str(exc)) from None
    from jaxplace_cli.cli.launch_job import Launch

    job = Launch(ns, forward, rest, job_dir)
    code = job.run()
    if not ns.quiet:
        say(*job.summary_lines())
    if gate is not None and code == 0:
        code = _check_budget(job_dir, gate)
    raise SystemExit(code)


def _check_budget(job_dir: Path, gate) -> int:
    from jaxplace_cli.analysis.audit import Audit
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.model.errors import JaxplaceError
    from jaxplace_cli.report.budget import verdict_lines

    try:
        verdict = Audit(job_dir, RuleConfig(min_bytes=1024)).judge(gate).budget
    except JaxplaceError as exc:
        say(f"jaxplace: error: {exc}")
        return exc.exit_code
    say(*verdict_lines(verdict))
    if verdict.passed:
        say(f"jaxplace: budget passed ({gate.source})")
    return 0 if verdict.passed else 1


