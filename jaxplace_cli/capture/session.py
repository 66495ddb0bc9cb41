"""A recording session: run directory + store + hooks + trace window around one script run.

The order matters and is the reason this module exists:
1. the run directory and a "running" manifest are written before anything runs;
2. ``--devices N`` goes into ``XLA_FLAGS`` before JAX is first imported;
3. hooks are installed as the script's ``import jax`` completes (before the script's next
   line), so ``jax.jit`` and friends the script sees are the recording ones, and JAX reads at
   its import what the script set before it (``JAX_ENABLE_X64``), as under python;
4. whatever way the script ends (exit code, exception, Ctrl-C, SIGTERM), the store is flushed
   and the manifest finalised *before* python's own ending is reproduced.
"""
from __future__ import annotations

import gc
import os
import platform
import signal
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli import __version__
from jaxplace_cli.capture import distributed, signals
from jaxplace_cli.capture.runner import Outcome, _strip_own_frames, run_target
from jaxplace_cli.capture.shutdown import threads_pending, wait_for_threads
from jaxplace_cli.capture.signals import _die_of, _hold_signals, _release_signals, resend_dropped_ctrl_c
from jaxplace_cli.capture.trace_modes import TRACE_OPS, TRACE_SECONDS
from jaxplace_cli.model.manifest import Device, DevicesOverride, Events, Hooks, Manifest, Placement, Target, Trace, Writer
from jaxplace_cli.store.layout import EVENTS, MANIFEST, MANIFEST_RESERVE, RunDirError, create_run_dir, write_manifest
from jaxplace_cli.store.writer import drop_reserve, make_reserve


@dataclass
class RunOptions:
    kind: str  # "path" | "module"
    target: str
    args: list[str]
    out: Path
    devices: int | None = None
    trace: str = "window"
    trace_seconds: float = TRACE_SECONDS
    trace_ops: int = TRACE_OPS  # the window also closes after this many dispatches (0: no limit)
    record: str = "all"  # all | transfers (see jaxhooks.install)
    policy: str = "default"
    placer: object = None  # () -> --policy's engine; called as the script's import jax completes
    command: list[str] = field(default_factory=list)
    progress: bool = False  # a live status line on stderr when it is a terminal (capture/progress.py)
    # modules the writer process imports while the script runs, for calls after it (jaxplace
    # run's verdict); when given, the writer process stays after the run (Session.writer_after)
    writer_after: list[str] = field(default_factory=list)


def simulate_cpu_devices(n: int) -> None:
    """Make the CPU backend expose ``n`` devices; must run before JAX is imported."""
    if "jax" in sys.modules:
        raise RuntimeError("--devices must be applied before JAX is imported")
    from jaxplace_cli.placement.devices import DEVICE_COUNT_FLAG, without_device_count

    os.environ["XLA_FLAGS"] = " ".join([*without_device_count(os.environ.get("XLA_FLAGS", "")),
                                        f"{DEVICE_COUNT_FLAG}={n}"])


def _devices_manifest() -> list[dict]:
    """Devices JAX initialised during the run (never initialises a backend itself). A script
    that never imported JAX has none, and its run's end imports neither the hooks nor numpy
    (~80 ms)."""
    if "jax" not in sys.modules:
        return []
    from jaxplace_cli.capture.jaxhooks.devices import initialised_devices

    return initialised_devices()


def devices_override(requested: int | None, devices: list[dict]) -> str:
    """A warning when ``--devices N`` did not hold: the script set ``jax_num_cpu_devices``
    (which JAX reads at backend start and prefers to the XLA_FLAGS jaxplace set) or started
    another platform's backend; "" when it held or was not asked for."""
    if not requested or not devices:
        return ""
    cpus = sum(1 for d in devices if d.get("platform") == "cpu")
    if cpus in (0, requested):
        return ""
    try:
        import jax

        set_by_script = int(jax.config.jax_num_cpu_devices)
    except Exception:
        set_by_script = -1
    why = (f"the script set jax_num_cpu_devices={set_by_script}" if set_by_script > 0
           else "the script changed the CPU device count itself (XLA_FLAGS or JAX's config)")
    return f"--devices {requested} was overridden: {why}, so the run used {cpus} CPU devices"


def _file_id(path: Path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _is_process(writer) -> bool:
    """The store is written by a child process (store/writer_process.py), not a thread here."""
    from jaxplace_cli.store.writer_process import WriterProcess

    return isinstance(writer, WriterProcess)


def _writer_manifest(writer) -> dict:
    """Where the store was written: a child process (its pid and peak RSS, which the script's
    own peak RSS does not include) or, where none could start, a thread of the script."""
    if _is_process(writer):
        return {"kind": "process", "pid": writer.pid, "peak_rss_kb": writer.peak_rss_kb, "sqlite": writer.sqlite}
    return {"kind": "thread", "sqlite": getattr(writer, "sqlite", "")}  # None: no writer was made


class Session:
    def __init__(self, opts: RunOptions):
        self.opts = opts
        # a process of a jax.distributed job records into OUT/proc-<i>/ (capture/distributed.py)
        # A followed child (--follow-children) inherits its parent's job variables (launch's
        # JAXPLACE_PROCESS_INDEX, SLURM_PROCID, ...) but is not a process of the job: it is
        # recorded under its parent's run, never as proc-<i>.
        self.job = None if opts.kind == "child" else distributed.detect_process()
        self.run_dir = create_run_dir(distributed.process_out(opts.out, self.job))
        self.manifest = Manifest(
            tool_version=__version__, target=Target(opts.kind, opts.target),
            argv=[opts.target, *opts.args], command=opts.command, cwd=os.getcwd(),
            python=platform.python_version(), host=platform.node(), pid=os.getpid(),
            policy=opts.policy, simulated_devices=opts.devices,
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), status="running", exit_code=None)
        if self.job is not None:  # said from the start: a process killed mid-run is still named
            self.manifest.distributed = self.job.manifest()
        try:
            write_manifest(self.run_dir, self.manifest)
        except OSError as exc:  # a full disk: one line, exit 2, before the script runs
            raise RunDirError(f"cannot write {self.run_dir / MANIFEST}: {exc.strerror or exc}") from None
        # room for the final run.json, should the disk fill during the run (finalize drops it)
        self._reserve = self.run_dir / MANIFEST_RESERVE
        make_reserve(self._reserve)
        from jaxplace_cli.capture.native import module as native_module
        from jaxplace_cli.store.writer import StoreWriter
        from jaxplace_cli.store.writer_process import open_writer

        try:
            # the schema first, here: a run directory that cannot hold it fails before the
            # script runs, with a clear message (the writer process would only find out later)
            StoreWriter(self.run_dir / EVENTS).close()
            self._ids = (_file_id(self.run_dir), _file_id(self.run_dir / EVENTS))
        except (OSError, sqlite3.Error) as exc:
            drop_reserve(self._reserve)
            raise RunDirError(f"cannot create {self.run_dir / EVENTS}: {exc}") from None
        # started now, while this process imports JAX; SQLite in C with the C hot path
        self._writer = open_writer(self.run_dir / EVENTS, native=native_module() is not None)
        if opts.writer_after and _is_process(self._writer):
            try:
                self._writer.preload(opts.writer_after)
            except OSError:
                pass
        self._bg = None
        self._recording = None  # capture.recording.Recording: the hooks, once start() holds them
        self.recorder = None
        self.trace = None
        self.hook_report = None
        self._finalized = False
        self.saved = True  # False when the final manifest could not be written
        self.pid = os.getpid()  # the recording process (a fork child of the script is not)
        self._held: list[int] | None = []  # signals that came while saving; None once saved
        self._prev_sigterm = None
        self.start_error = ""  # the recording could not start when the script imported JAX

    def start(self) -> None:
        self._install_sigterm()  # first: a SIGTERM while JAX loads still saves the run
        if self.opts.devices and "jax" not in sys.modules:
            simulate_cpu_devices(self.opts.devices)
        if "jax" not in sys.modules:
            # jaxplace's own objects (~23k: its modules, the command line, the hooks' tables) out
            # of the cyclic GC's way: otherwise they move the script's full collections, and one
            # landed in JAX's first lowering (the mhlo import: 10 -> 42 ms; a 3-op script's body
            # 114 -> 151 ms, issue 29). Only what exists before JAX is imported is frozen, so
            # JAX's and the script's objects are collected as under python.
            gc.freeze()
        # jaxplace launch: its stop requests watched from now (a script that never imports JAX
        # is stopped too), its coordinator given to JAX when JAX is imported
        distributed.before_script(self.job, self)
        if "jax" in sys.modules:  # a followed child, a Python policy file, a sitecustomize
            self._start_recording()
            return
        from jaxplace_cli.capture.import_hook import after_import

        after_import("jax", self._start_when_imported)

    def _start_when_imported(self) -> None:
        """As the script's ``import jax`` completes: JAX reads what the script set first
        (``JAX_ENABLE_X64``: float32 when jaxplace imported JAX first). An error must not fail
        that import (the run says so); a Ctrl-C goes to the script; once saved, nothing starts."""
        if self._finalized:  # JAX imported by an atexit: the store is closed
            return
        try:
            self._start_recording()
        except Exception as exc:  # noqa: BLE001 - see above
            self.start_error = f"{type(exc).__name__}: {exc}"

    def _start_recording(self) -> None:
        """Hooks, recorder, writer thread and trace window, once JAX is imported."""
        import jax
        import jaxlib

        from jaxplace_cli.capture.jaxhooks.trace_window import TraceWindow
        from jaxplace_cli.capture.recorder import Recorder
        from jaxplace_cli.capture.recording import Recording
        from jaxplace_cli.store.writer import BackgroundWriter

        self.manifest.jax_version, self.manifest.jaxlib_version = jax.__version__, jaxlib.__version__
        self.recorder = Recorder()
        if self.opts.progress:  # before the writer thread binds recorder.take
            from jaxplace_cli.capture.progress import LiveStatus

            self.status = LiveStatus.start(self.recorder)
        take = _is_process(self._writer)  # the child formats the rows itself
        self._bg = BackgroundWriter(self.recorder.take if take else self.recorder.drain, self._writer,
                                    counts=self.recorder.counts)
        self._bg.start()
        # back-pressure: a backlog over the limit waits for the writer (JAXPLACE_BACKLOG_ROWS:
        # a smaller limit, for tests)
        limit = os.environ.get("JAXPLACE_BACKLOG_ROWS", "")
        self.recorder.attach_writer(self._bg.wake, *([int(limit)] if limit.isdigit() and int(limit) > 0 else []))
        # the hooks, held for the whole run (a device_placement or budget() in the script
        # shares them), with --policy's placer (built now: it imports JAX) for every thread
        placer = self.opts.placer() if self.opts.placer is not None else None
        self._recording = Recording(self.recorder, self.opts.record, placer=placer)
        self.hook_report = self._recording.start()
        self.manifest.record = self.opts.record
        from jaxplace_cli.capture import native

        self.manifest.capture = native.kind()
        for name, reason in self.hook_report.failed:
            self.recorder.marker("hook-unavailable", f"{name}: {reason}")
        self.trace = TraceWindow(self.run_dir, self.opts.trace, self.opts.trace_seconds, self.opts.trace_ops)
        self.trace.arm()
        self.manifest.hooks = Hooks(self.hook_report.installed,
                                    [f"{n}: {r}" for n, r in self.hook_report.failed])
        write_manifest(self.run_dir, self.manifest)

    def _install_sigterm(self) -> None:
        """SIGTERM, SIGHUP (terminal or ssh session closed), SIGQUIT and SIGUSR1 kill python
        without cleanup; save what was recorded, then die the same way (signals.install_fatal)."""
        signals.install_fatal(self._on_fatal)
        # Ctrl-C: python's own handler, minus the interrupts python would drop (signals.py)
        if sys.unraisablehook is sys.__unraisablehook__:
            sys.unraisablehook = resend_dropped_ctrl_c(sys.unraisablehook)

    def _on_fatal(self, signum, frame) -> None:
        if self._held is not None and self._finalized:
            # saving is under way (atexit in a child; the handler swap of _hold_signals does
            # not apply there): held like the others, acted on once the run is saved
            self._held.append(signum)
            return
        self.finalize(Outcome("terminated", 128 + signum, f"terminated by {signal.Signals(signum).name}"))
        _die_of(signum)

    def run(self) -> Outcome:
        try:
            self.start()
        except KeyboardInterrupt as exc:  # Ctrl-C before the script started: python would die too
            outcome = Outcome("interrupted", 130, "KeyboardInterrupt",
                              (type(exc), exc, _strip_own_frames(exc.__traceback__)))
            self.finalize(outcome)
            return outcome
        outcome = run_target(self.opts.kind, self.opts.target, self.opts.args)
        if os.getpid() == self.pid and threads_pending():  # python's order: the ending said, the threads waited for
            outcome.finish()
            outcome.print_exit_message()
            wait_for_threads()
        self.finalize(outcome)
        return outcome

    def finalize(self, outcome: Outcome) -> None:
        """Flush everything and write the final manifest; safe to call twice.

        A Ctrl-C or SIGTERM that arrives while saving is held until the run is saved, then
        acted on (an interrupted half-written run would be worse than a late exit)."""
        if self._finalized or os.getpid() != self.pid:
            return  # a fork child of the script ending: the run belongs to the parent
        held = self._held
        self._finalized = True
        signals.stop_resending()  # after the body, a Ctrl-C python drops is dropped (atexit, the threads' wait)
        previous = _hold_signals(held)
        try:
            self._finalize(outcome)
        finally:
            self._held = None
            _release_signals(previous, held, outcome)

    def _finalize(self, outcome: Outcome) -> None:
        if getattr(self, "status", None) is not None:
            self.status.stop()  # the terminal whole again before any traceback or summary

        if self.trace is not None:
            self.trace.close()
        placer = None
        if self._recording is not None:
            # "terminated" comes from a fatal signal's handler only: no call into JAX from there
            self._recording.stop(sample=outcome.status != "terminated")
            # the placer placed only once the hooks were in (hook_report: start() returned)
            placer = self._recording.placer if self.hook_report is not None else None
        if placer is not None:
            self.manifest.placement = Placement(placer.policy.label, placer.decisions, placer.fallbacks,
                                                placer.granularity, placer.on_error, placer.device_names)
        if self.recorder is not None:
            self.recorder.detach_writer()
        if self._bg is not None:
            self._bg.stop()
        write_error = self._bg.error if self._bg else ""
        writer = self._writer
        if writer is not None:
            if self._bg is not None and hasattr(writer, "final_progress"):  # a writer thread
                writer.final_progress(write_error)
            try:
                # a WriterProcess: waits for the child to write its backlog; it stays for the
                # verdict unless a fatal signal ends this process now (nobody would let it go)
                if _is_process(writer):
                    writer.close(linger=bool(self.opts.writer_after) and outcome.status != "terminated")
                else:
                    writer.close()
            except Exception as exc:
                write_error = write_error or f"closing the events store: {type(exc).__name__}: {exc}"
            write_error = write_error or getattr(writer, "error", "")
        lost = self._lost(writer)
        if writer is not None and self._ids != (_file_id(self.run_dir), _file_id(self.run_dir / EVENTS)):
            # SQLite kept writing into the deleted file without an error: all of it is gone
            lost = self._lost(None)
            write_error = (f"the run directory {self.run_dir} (or its {EVENTS}) was removed or "
                           f"replaced while the script ran; nothing recorded could be kept")
        rec = self.recorder
        m = self.manifest
        m.status, m.exit_code, m.error = outcome.status, outcome.exit_code, outcome.error
        m.ended = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        devices = _devices_manifest()
        override = devices_override(self.opts.devices, distributed.own_devices(devices))
        if override:
            m.devices_override = DevicesOverride(
                self.opts.devices, sum(1 for d in devices if d.get("platform") == "cpu"), override)
            m.warnings.append(override)
        m.devices = [Device(**d) for d in devices]
        m.events = Events(rec.counts["ops"] if rec else 0, rec.counts["transfers"] if rec else 0,
                          lost, write_error, Writer(**_writer_manifest(writer)),
                          rec.backpressure_waits if rec else 0,
                          round(rec.backpressure_ns / 1e9, 6) if rec else 0.0,
                          rec.recording_errors if rec else 0, rec.first_recording_error if rec else "")
        if rec is not None and rec.recording_errors:  # the user's results were kept; say it once
            m.warnings.append(rec.recording_error_line())
        if self.start_error:
            m.warnings.append(f"the recording did not start when the script imported JAX: {self.start_error}")
        m.trace = Trace(self.trace.mode if self.trace else "off", self.trace.state if self.trace else "off",
                        self.opts.trace_seconds, self.opts.trace_ops,
                        self.trace.traced_ops if self.trace else 0,
                        self.trace.files() if self.trace else [], self.trace.note if self.trace else "",
                        self.trace.cut if self.trace else "", self.trace.steps if self.trace else None)
        section = {"devices": devices, "distributed": m.distributed}
        distributed.finish(section, self.job)  # process index/count, coordinator, devices
        m.distributed = section.get("distributed")
        try:
            try:
                write_manifest(self.run_dir, self.manifest)
            except OSError:  # a full disk: the reserve made room for it
                drop_reserve(self._reserve)
                write_manifest(self.run_dir, self.manifest)
            self.saved = True
        except OSError as exc:
            self.saved = False
            if sys.__stderr__ is not None:  # closed: not into the script's stdout (print(file=None))
                sys.__stderr__.write(f"jaxplace: could not write {self.run_dir}/run.json: {exc}\n")
        drop_reserve(self._reserve)

    def writer_after(self):
        """The writer process that stayed after the run (``RunOptions.writer_after``) for its
        ``call``, ``print_at_exit`` and ``end``; None where there is none."""
        return self._writer if getattr(self._writer, "lingering", False) else None

    def _lost(self, writer) -> int:
        """Events (ops + transfers) the recorder made that the store does not hold: what the
        writer committed (its own count, or the store's where the writer died) taken from
        what the recorder handed on, table by table. ``writer`` None: nothing was kept."""
        rec = self.recorder
        if rec is None:
            return 0
        # None: the writer died and its store cannot be read
        committed = (getattr(writer, "committed", None) if writer is not None else {}) or {}
        if writer is not None and not _is_process(writer):  # a writer thread: its own count
            committed = writer.committed
        return sum(max(0, rec.counts[t] - int(committed.get(t, 0))) for t in ("ops", "transfers"))
