"""The ``jaxplace`` command line: each command parses, calls library code, renders.

Usage errors (missing script, bad directory, bad option) print one line prefixed with
``jaxplace:`` and exit 2; jaxplace never shows its own traceback. Nothing here imports JAX at
module level, so ``jaxplace run --devices N`` can configure JAX before it is first imported.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from . import __version__

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Profile and audit where a JAX program's ops run and which line moved which bytes.",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> None:
    typer.echo(f"jaxplace: error: {message}", err=True)
    raise typer.Exit(code)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"jaxplace {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version_callback,
                                       is_eager=True, help="Print the version and exit.")) -> None:
    """Profile and audit where a JAX program's ops run and which line moved which bytes."""


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                               "allow_interspersed_args": False})
def run(
    ctx: typer.Context,
    script: Optional[str] = typer.Argument(None, help="Python script to run (its arguments follow it)."),
    module: Optional[str] = typer.Option(None, "-m", "--module", help="Run a module as `python -m` would."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Run directory to create (default jaxplace-runs/<script>-<timestamp>/; never overwritten)."),
    devices: Optional[int] = typer.Option(None, "--devices", min=1,
                                          help="Simulate N CPU devices (sets XLA_FLAGS before JAX is imported)."),
    trace: str = typer.Option("window", "--trace",
                              help="Native jax.profiler trace: window (first --trace-seconds after the first dispatch), full, or off."),
    trace_seconds: float = typer.Option(3.0, "--trace-seconds", min=0.0, help="Length of the trace window."),
    no_trace: bool = typer.Option(False, "--no-trace", help="Same as --trace off."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing of jaxplace's own after the run."),
) -> None:
    """Run SCRIPT (or -m MODULE) exactly like python, recording every op and transfer.

    Everything after the script name is passed to the script: jaxplace run train.py --epochs 3
    The exit code, stdout and stderr are the script's own. After the run, a one-paragraph summary
    and the audit command are printed to stderr (unless --quiet).
    """
    from .hooks.trace_window import OFF, TRACE_MODES
    from .rundir import RunDirError, default_run_dir
    from .runner import ScriptNotFound, exit_like_python, resolve_target
    from .session import RunOptions, Session

    args = list(ctx.args)
    if module is None and script is None:
        fail("nothing to run: give a script (jaxplace run train.py) or -m MODULE")
    if module is not None and script is not None:
        args = [script, *args]  # `jaxplace run -m pkg arg1`: arg1 belongs to the module
    if trace not in TRACE_MODES:
        fail(f"--trace must be one of {', '.join(TRACE_MODES)}, not {trace!r}")
    if devices is not None and "jax" in sys.modules:
        fail("--devices must be applied before JAX is imported; run jaxplace as a command")
    try:
        kind, target = resolve_target(None if module else script, module)
    except ScriptNotFound as exc:
        fail(str(exc))
    run_dir = out if out is not None else default_run_dir(target)
    opts = RunOptions(kind, target, args, run_dir, devices, OFF if no_trace else trace,
                      trace_seconds, command=["jaxplace", *sys.argv[1:]])
    try:
        session = Session(opts)
    except RunDirError as exc:
        fail(str(exc))
    outcome = session.run()
    outcome.finish()
    if not quiet:
        _print_run_summary(session)
    raise typer.Exit(exit_like_python(outcome))


def _print_run_summary(session) -> None:
    from .sizes import human_bytes

    m = session.manifest
    ev = m.get("events", {})
    try:
        from .analysis.run import open_run
        from .analysis.summary import summarize

        s = summarize(open_run(session.run_dir))
        kinds = ", ".join(f"{k} {v.count} ({human_bytes(v.bytes)})" for k, v in s.totals.items())
    except Exception:
        kinds = f"{ev.get('transfers', 0)} transfers"
    err = sys.stderr
    print(f"jaxplace: {m.get('status')} (exit {m.get('exit_code')}): recorded {ev.get('ops', 0):,} ops, "
          f"transfers ≥1 KiB: {kinds}", file=err)
    if ev.get("lost_rows"):
        print(f"jaxplace: warning: {ev['lost_rows']} events were lost: {ev.get('write_error')}", file=err)
    for h in m.get("hooks", {}).get("unavailable", []):
        print(f"jaxplace: warning: hook unavailable on this JAX version (not recorded): {h}", file=err)
    if m.get("trace", {}).get("note"):
        print(f"jaxplace: {m['trace']['note']}", file=err)
    print(f"jaxplace: run saved to {session.run_dir}; audit it with: jaxplace audit {session.run_dir}", file=err)


FORMATS = ("rich", "text", "json")


@app.command()
def audit(
    path: Path = typer.Argument(..., help="A jaxplace run directory, a jax.profiler log dir, or a .xplane.pb file."),
    format: Optional[str] = typer.Option(None, "--format", "-f", help="rich (default on a TTY), text, or json."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to this file (format from its extension: .json, .txt)."),
    min_bytes: str = typer.Option("1KiB", "--min-bytes", help="Transfers smaller than this are counted apart (e.g. 0, 1KiB, \"1 MB\")."),
    top: int = typer.Option(20, "--top", min=1, help="How many transfer sites to list."),
    rule: Optional[List[str]] = typer.Option(None, "--rule", help="Only run these rules (repeatable)."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", help="Skip these rules (repeatable)."),
    loop_threshold: int = typer.Option(3, "--loop-threshold", min=2, help="Repeats at one line that count as 'in a loop'."),
) -> None:
    """Report devices, transfers per kind, top transfer sites, ops per device, and findings."""
    from .analysis import audit_run
    from .analysis.findings import RULES, RuleConfig
    from .analysis.run import InputError, classify_input, open_run
    from .sizes import parse_size

    fmt = format or _format_from_output(output)
    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    try:
        min_b = parse_size(min_bytes)
    except ValueError as exc:
        fail(f"--min-bytes: {exc}")
    for r in (rule or []) + (ignore or []):
        if r not in RULES:
            fail(f"unknown rule {r!r}; rules are: {', '.join(RULES)}")
    cfg = RuleConfig(min_bytes=min_b, loop_threshold=loop_threshold)
    try:
        kind = classify_input(path)
        if kind == "run":
            result = audit_run(open_run(path), cfg, rule, ignore, top_sites=top)
        else:
            from .analysis.trace_audit import audit_trace

            result = audit_trace(path, cfg, top_sites=top)
    except InputError as exc:
        fail(str(exc))
    _emit(result, fmt, output)


def _format_from_output(output: Optional[Path]) -> str:
    if output is not None:
        return {".json": "json", ".txt": "text"}.get(output.suffix.lower(), "text")
    return "rich" if sys.stdout.isatty() else "text"


def _emit(result, fmt: str, output: Optional[Path]) -> None:
    from .report import render_to_string

    text = render_to_string(result, fmt)
    if output is None:
        sys.stdout.write(text)
        return
    from .report import write_atomic

    try:
        write_atomic(output, text)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")


@app.command()
def devices(
    n: Optional[int] = typer.Option(None, "--devices", min=1, help="Simulate N CPU devices."),
    format: str = typer.Option("text", "--format", "-f", help="text or json."),
) -> None:
    """List the devices JAX sees: name, platform, id, kind, process, memory."""
    import json

    if n is not None:
        from .session import simulate_cpu_devices

        simulate_cpu_devices(n)
    import jax

    from .devices import describe_devices

    devs = describe_devices(jax.devices())
    if format == "json":
        typer.echo(json.dumps(devs, indent=2))
        return
    if format != "text":
        fail(f"--format must be text or json, not {format!r}")
    from rich.console import Console
    from rich.table import Table

    from .sizes import human_bytes

    t = Table(title=f"JAX {jax.__version__}: {len(devs)} device(s), default backend {jax.default_backend()}")
    for col in ("name", "platform", "id", "kind", "process", "memory"):
        t.add_column(col)
    for d in devs:
        mem = human_bytes(d["memory_bytes"]) if d["memory_bytes"] else "unknown"
        t.add_row(d["name"], d["platform"], str(d["id"]), d["kind"], str(d["process"]), mem)
    Console().print(t)


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point: every error jaxplace reports is one line.

    Typer's exception classes moved between versions (click, then a vendored copy), so they
    are recognised by their public shape: ``exit_code`` and ``format_message``.
    """
    import os

    try:
        rv = app(args=argv, standalone_mode=False, prog_name="jaxplace")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        typer.echo("jaxplace: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the one place errors become exit codes
        name = type(exc).__name__
        if name == "Exit" and hasattr(exc, "exit_code"):
            sys.exit(exc.exit_code)
        if name == "Abort":
            typer.echo("jaxplace: aborted", err=True)
            sys.exit(130)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            lines = (exc.format_message() or name).splitlines()
            typer.echo(f"jaxplace: error: {lines[0] if lines else name}", err=True)
            sys.exit(exc.exit_code if exc.exit_code not in (0, 1) else EXIT_USAGE)
        if os.environ.get("JAXPLACE_DEBUG"):
            raise
        typer.echo(f"jaxplace: internal error: {name}: {exc} "
                   "(set JAXPLACE_DEBUG=1 for the traceback, and please report it)", err=True)
        sys.exit(3)
    # without standalone mode, typer returns the code of a typer.Exit instead of raising it
    sys.exit(rv if isinstance(rv, int) else 0)
