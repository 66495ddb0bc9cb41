"""``jaxplace run`` itself, once cli/run.py parsed its command line. No typer import here:
see cli/run.py for why."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from jaxplace_cli.model.errors import UsageError
from jaxplace_cli.report.run_lines import say


def run_script(*, script: Optional[str], args: list[str], module: Optional[str], out: Optional[Path],
               devices: Optional[str], policy: str, on_policy_error: str, granularity: str,
               trace: str, trace_seconds: float, trace_ops: int, no_trace: bool, record: str,
               budget: Optional[Path], follow_children: bool, quiet: bool,
               misplaced: Sequence[str] = ()) -> None:
    """``jaxplace run`` itself, whichever parser read the command line; ends in SystemExit."""
    from jaxplace_cli.capture.runner import ScriptNotFound, resolve_target
    from jaxplace_cli.capture.session import RunOptions, Session
    from jaxplace_cli.capture.trace_modes import OFF, TRACE_MODES
    from jaxplace_cli.store.layout import RunDirError

    if module is None and script is None:
        raise UsageError("nothing to run: give a script (jaxplace run train.py) or -m MODULE")
    if module is not None and script is not None:
        args = [script, *args]  # `jaxplace run -m pkg arg1`: arg1 belongs to the module
    if trace not in TRACE_MODES:
        raise UsageError(f"--trace must be one of {', '.join(TRACE_MODES)}, not {trace!r}")
    n_devices, device_spec = None, None
    if devices is not None:
        if devices.strip().isdigit():
            n_devices = int(devices)
            if n_devices < 1:
                raise UsageError("--devices N needs N >= 1")
            if "jax" in sys.modules:
                raise UsageError("--devices must be applied before JAX is imported; run jaxplace as a command")
        else:
            device_spec = devices
    if record not in ("all", "transfers"):
        raise UsageError(f"--record must be all or transfers, not {record!r}")
    if on_policy_error not in ("raise", "fallback"):
        raise UsageError(f"--on-policy-error must be raise or fallback, not {on_policy_error!r}")
    if granularity not in ("unit", "op"):
        raise UsageError(f"--granularity must be unit or op, not {granularity!r}")
    try:
        kind, target = resolve_target(None if module else script, module)
    except ScriptNotFound as exc:
        raise UsageError(str(exc)) from None
    if n_devices:
        from jaxplace_cli.capture.session import simulate_cpu_devices

        simulate_cpu_devices(n_devices)  # before a Python policy file can import JAX
    placer = None
    if policy != "default" or device_spec or granularity != "unit":
        placer = _placer(policy, device_spec, on_policy_error, granularity, n_devices)
    gate = None
    if budget is not None:  # a typo in the budget is an error before anything runs
        from jaxplace_cli.cli.audit import load_gate_budget

        gate = load_gate_budget(budget, {})
    from jaxplace_cli.capture.distributed import default_out, detect_process

    run_dir = out if out is not None else default_out(target, detect_process())  # a job: one dir
    opts = RunOptions(kind, target, args, run_dir, None, OFF if no_trace else trace,
                      trace_seconds, policy=policy, placer=placer, record=record,
                      command=["jaxplace", *sys.argv[1:]])
    opts.devices = n_devices
    opts.trace_ops = trace_ops
    opts.progress = not quiet
    from jaxplace_cli.cli.run_summary import PRELOAD

    opts.writer_after = PRELOAD  # the writer process stays for the verdict (cli/run_summary.py)
    try:
        session = Session(opts)
    except RunDirError as exc:
        raise UsageError(str(exc)) from None
    if follow_children:
        from jaxplace_cli.capture.child import child_environment

        child_environment(session.run_dir, record)
        session.manifest.follow_children = True
    from jaxplace_cli.capture.import_hook import after_import

    after_import("jax", _install_jax_alias)  # `with jax.device_placement(p):` runs as written
    if not quiet:  # where the run goes, before the script prints anything (as memray does)
        _print_start(session, n_devices, policy if placer is not None else None)
        if misplaced:
            from jaxplace_cli.report.run_lines import misplaced_line

            say(misplaced_line(misplaced, script if module is None else f"-m {module}"))
    _end(session, session.run(), gate, quiet)


def _end(session, outcome, gate, quiet: bool) -> None:
    """What python prints, jaxplace's summary and budget verdict, then python's exit."""
    from jaxplace_cli.capture.distributed import script_ended
    from jaxplace_cli.capture.runner import exit_like_python

    outcome.finish()
    if os.getpid() != session.pid:  # a fork child of the script ending: the run and its words are the parent's
        raise SystemExit(exit_like_python(outcome))
    # the summary after the interpreter's teardown only on a plain ending: a budget verdict, an
    # exit message or launch's report must come after it
    plain_end = (gate is None and outcome.exit_message is None and session.job is None
                 and outcome.status in ("complete", "failed"))
    if not (plain_end and _summary_at_exit(session, quiet)):
        try:
            _print_run_summary(session, quiet)
        finally:
            writer = session.writer_after()
            if writer is not None:
                writer.end()
    code = 0
    if gate is not None and outcome.status != "interrupted":
        code = _check_budget(session.run_dir, gate, outcome.exit_code)
    if not code and outcome.exit_message is not None:  # written before launch may end the process
        outcome.print_exit_message()
    # under jaxplace launch: how the script ended, before python's exit (which JAX's shutdown
    # can hold up for as long as the job's other processes run)
    script_ended(code or outcome.exit_code, outcome.error)
    if code:
        raise SystemExit(code)
    raise SystemExit(exit_like_python(outcome))


def _placer(policy, device_spec, on_policy_error, granularity, n_devices):
    """What builds the placement engine, checked before the run directory exists: `--devices
    two`, `--devices gpu` on a CPU-only machine, `pin:cpu:7` with 4 devices and a typo in a
    rules file are one line, and nothing is created. The checks import no JAX; the engine
    does, so it is built as the script's own `import jax` completes (capture/session.py), after
    whatever the script set in os.environ first (JAX_ENABLE_X64: float64, as under python)."""
    from jaxplace_cli.placement import PolicyLoadError
    from jaxplace_cli.placement.devices import parse_device_spec
    from jaxplace_cli.placement.policies import check_before_run, load_policy

    try:
        loaded = load_policy(policy)
        names = parse_device_spec(device_spec) if device_spec else None
        check_before_run(loaded, names, n_devices, on_policy_error)
    except (PolicyLoadError, ValueError) as exc:
        raise UsageError(str(exc)) from None

    def build():
        from jaxplace_cli.integrations.placement import make_placer  # imports the hooks, numpy

        return make_placer(loaded, names, on_policy_error, granularity)
    return build


def _check_budget(run_dir, gate, script_code: int) -> int:
    """The budget verdict after the run; the script's own failure code wins and is said."""
    from jaxplace_cli.analysis.budgets import judge_run
    from jaxplace_cli.analysis.run import analyse, open_run
    from jaxplace_cli.model.safe import plain
    from jaxplace_cli.report.budget import verdict_lines
    from jaxplace_cli.store.reader import reading

    run = open_run(run_dir)
    with reading(run_dir):
        result = analyse(run, lambda: judge_run(run, gate))
    say(*verdict_lines(result.budget), after_script=True)
    verdict = 0 if result.budget.passed else 1
    if script_code:
        say(f"jaxplace: the script exited with {script_code}; that exit code is kept"
            + (" (the budget was also exceeded, see above)" if verdict else ""), after_script=True)
        return 0
    if verdict == 0:
        say(f"jaxplace: budget passed ({plain(gate.source)})", after_script=True)
    return verdict


def _install_jax_alias() -> None:
    from jaxplace_cli.integrations.placement import install_jax_alias  # imports JAX: only once it is

    install_jax_alias()


def _print_start(session, n_devices, policy) -> None:
    from jaxplace_cli.report.run_lines import start_line

    kind, target = session.opts.kind, session.opts.target
    target = f"-m {target}" if kind == "module" else "<stdin>" if kind == "stdin" else target
    extra = [f"{n_devices} simulated CPU device{'s' if n_devices != 1 else ''}"] if n_devices else []
    extra += [f"policy {policy}"] if policy else []
    say(start_line(target, session.run_dir, extra))


def _summary_call(session, quiet: bool) -> tuple:
    """What the writer process calls for the summary: the script's last working directory
    decides how file names are said."""
    import os

    return "jaxplace_cli.cli.run_summary", "run_summary", {
        "run_dir": str(session.run_dir), "quiet": quiet, "cwd": os.getcwd()}


def _summary_timeout(session) -> float:
    """Never forever: ~1 s per 100,000 events is the audit's pace here, a minute spare."""
    ev = session.manifest.events
    return 60 + (ev.ops + ev.transfers) / 10_000


def _summary_at_exit(session, quiet: bool) -> bool:
    """The summary made by the writer process while this interpreter tears down, and written
    after it (store/writer_process.py ``print_at_exit``; the measured gain in capture/_native.c):
    the verdict then costs the script's process nothing. False where that cannot be arranged."""
    from jaxplace_cli.model.safe import plain

    writer = session.writer_after()
    if writer is None or not session.saved or sys.__stderr__ is None:
        return False
    try:
        from jaxplace_cli.capture._native import print_at_exit
    except ImportError:  # not built: the script's process waits for the summary instead
        return False
    fallback = (f"jaxplace: the verdict was not made at the run's end; "
                f"`jaxplace audit {plain(session.run_dir)}` makes it")
    return writer.print_at_exit(*_summary_call(session, quiet), _summary_timeout(session), fallback,
                                sys.__stderr__, print_at_exit)


def _print_run_summary(session, quiet: bool) -> None:
    """What was recorded and the verdict (cli/run_summary.py), made by the writer process
    where it waits for it, else here; nothing at all when stderr is closed."""
    from jaxplace_cli.cli import run_summary
    from jaxplace_cli.model.safe import plain

    if sys.__stderr__ is None:  # closed: nothing would be seen (report/run_lines.say)
        return
    lines, interrupted, timed_out = None, False, False
    timeout = _summary_timeout(session)
    writer = session.writer_after()
    if session.saved and writer is not None:
        try:
            lines = writer.call(*_summary_call(session, quiet), timeout=timeout)
        except KeyboardInterrupt:  # Ctrl-C now: the lines that need no audit
            interrupted = True
        except TimeoutError:  # no answer in time: not the same audit again, here
            interrupted = timed_out = True
        except Exception:  # noqa: BLE001 - no writer process, or it could not: made here
            lines = None
        if not (isinstance(lines, list) and all(isinstance(line, str) for line in lines)):
            lines = None
    if lines is None:
        lines = run_summary.summary_lines_of(session.manifest, session.run_dir, quiet, session.saved,
                                             verdict_wanted=not interrupted)
        if timed_out and not quiet:
            lines.insert(-1, f"jaxplace: the verdict took longer than {timeout:.0f} s and was left out; "
                             f"`jaxplace audit {plain(session.run_dir)}` makes it")
    say(*lines, after_script=True)
