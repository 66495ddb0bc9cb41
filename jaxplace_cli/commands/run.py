"""`jaxplace run`: run a script like python, recording every op and transfer."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .run_argv import RUN_DEFAULTS as D
from .run_script import run_script


def run(
    ctx: typer.Context,
    script: Optional[str] = typer.Argument(None, help="Python script to run (its arguments follow it)."),
    module: Optional[str] = typer.Option(None, "-m", "--module", help="Run a module as `python -m` would."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Run directory to create (default jaxplace-runs/<script>-<timestamp>/; never overwritten)."),
    devices: Optional[str] = typer.Option(None, "--devices",
                                          help="N: simulate N CPU devices (sets XLA_FLAGS before JAX is imported). "
                                               "SPEC (gpu, cpu:0,cpu:1): the devices a policy may use."),
    policy: str = typer.Option(D["policy"], "--policy", "-p",
                               help="Placement policy: default, pin:DEVICE, rr, rr-strict, RULES.toml, FILE.py:NAME or module:NAME (docs/policies.md)."),
    on_policy_error: str = typer.Option(D["on_policy_error"], "--on-policy-error",
                                        help="raise (stop with one line, exit 2) or fallback (let JAX decide and record it)."),
    granularity: str = typer.Option(D["granularity"], "--granularity",
                                    help="unit: place eager ops and jit calls whole; op: also place the primitives inside jitted functions."),
    trace: str = typer.Option(D["trace"], "--trace",
                              help="Native jax.profiler trace: window (first --trace-seconds after the first dispatch), full, or off."),
    trace_seconds: float = typer.Option(D["trace_seconds"], "--trace-seconds", min=0.0, help="Length of the trace window."),
    trace_ops: int = typer.Option(D["trace_ops"], "--trace-ops", min=0,
                                  help="The window also closes after this many dispatched ops (0: no limit)."),
    no_trace: bool = typer.Option(D["no_trace"], "--no-trace", help="Same as --trace off."),
    record: str = typer.Option(D["record"], "--record",
                               help="all: every op and transfer (default). transfers: skip eager-op hooks (cheaper on eager code; "
                                    "jit calls, device_put/get and host reads are still recorded)."),
    budget: Optional[Path] = typer.Option(None, "--budget", "-b",
                                          help="Budget file (TOML): after the run, exit 1 when a limit is exceeded (the script's own failure code wins)."),
    follow_children: bool = typer.Option(D["follow_children"], "--follow-children",
                                         help="Also record child Python processes that use JAX (subprocess, multiprocessing spawn) "
                                              "into RUN/children/<pid>/; fork children without exec are not recorded."),
    quiet: bool = typer.Option(D["quiet"], "--quiet", "-q", help="Print nothing of jaxplace's own after the run."),
) -> None:
    """Run SCRIPT (or -m MODULE) exactly like python, recording every op and transfer.

    Everything after the script name is passed to the script: jaxplace run train.py --epochs 3
    The exit code, stdout and stderr are the script's own. After the run, a one-paragraph summary
    and the audit command are printed to stderr (unless --quiet).
    """
    run_script(script=script, args=list(ctx.args), module=module, out=out, devices=devices,
               policy=policy, on_policy_error=on_policy_error, granularity=granularity,
               trace=trace, trace_seconds=trace_seconds, trace_ops=trace_ops, no_trace=no_trace,
               record=record, budget=budget, follow_children=follow_children, quiet=quiet)
