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
would have). When a process fails, launch stops the others: SIGTERM (``jaxplace run`` saves
the run and dies of it), then, after ``--grace`` seconds, SIGKILL to the process group — a
process blocked in a collective whose peer died never returns to Python to act on SIGTERM
(measured: 30 s and counting with gloo). Each store stays readable either way (SQLite WAL,
the writer child commits what reached it). ``JOB/job.json`` records every process's exit
code or signal and which process failed first; launch exits with that process's code.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from jaxplace_cli.cli.run import RunUsageError, split

DESCRIPTION = ("Start a jax.distributed job of N local processes, each recorded by jaxplace run "
               "into one job directory (JOB/proc-<i>/).")
EPILOG = """\
Every `jaxplace run` option (--policy, --trace, --record, ...) applies to each process.
jax.distributed.initialize() with no arguments finds the coordinator (127.0.0.1, a free port),
the process count and this process's index. Output lines are prefixed [p0], [p1], ...
The exit code is the first failing process's (0 when all succeed; 1 when only the budget failed).

examples:
  jaxplace launch -n 2 --devices-per-process 2 train.py --steps 10
  jaxplace launch -n 4 --out runs/job --budget audits/job.toml train.py
  jaxplace audit runs/job
"""
LAUNCH_ONLY = ("-n", "--processes", "--devices-per-process", "--grace", "--port", "--out",
               "-b", "--budget")
POLL_S = 0.05


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
    p.add_argument("--grace", type=_seconds, default=5.0, metavar="S",
                   help="when stopping processes: seconds between SIGTERM and SIGKILL (default: %(default)s)")
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


def free_port() -> int:
    """A port nothing listens on now (the coordinator binds it a moment later, as torchrun's
    does: another program could take it in between, then process 0 fails to bind and says so)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> None:
    """``jaxplace launch ARGV``; ends in SystemExit with the job's exit code."""
    from jaxplace_cli.capture.runner import ScriptNotFound, resolve_target
    from jaxplace_cli.model.errors import UsageError
    from jaxplace_cli.store.layout import RunDirError, create_run_dir, default_run_dir

    ns, forward, rest = parse(argv)
    script = rest[1] if rest[:1] == ["--"] else (rest[0] if rest and ns.module is None else None)
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
    job = Launch(ns, forward, rest, job_dir)
    code = job.run()
    if not ns.quiet:
        for line in job.summary_lines():
            print(line, file=sys.stderr)
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
        print(f"jaxplace: error: {exc}", file=sys.stderr)
        return exc.exit_code
    for line in verdict_lines(verdict):
        print(line, file=sys.stderr)
    if verdict.passed:
        print(f"jaxplace: budget passed ({gate.source})", file=sys.stderr)
    return 0 if verdict.passed else 1


class Launch:
    """The processes of one launch, their output, their ends, and ``job.json``."""

    def __init__(self, ns, forward: list[str], rest: list[str], job_dir: Path):
        self.ns, self.job_dir, self.n = ns, job_dir, ns.processes
        self.port = ns.port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        dev = ["--devices", str(ns.devices_per_process)] if ns.devices_per_process else []
        self.command = [sys.executable, "-m", "jaxplace_cli", "run", *forward, "--out", str(job_dir),
                        *dev, *rest]
        self.procs: list[subprocess.Popen] = []
        self.controls: list[int] = []  # write ends of each process's stop pipe
        self.ends: list[dict | None] = [None] * self.n
        self.first_failure: tuple[int, int] | None = None
        self.signals: list[int] = []
        self.stopping_since: float | None = None
        self.t0 = time.monotonic()
        self.locks = {1: threading.Lock(), 2: threading.Lock()}
        self.doc = {"schema_version": 1, "tool": "jaxplace", "kind": "launch",
                    "process_count": self.n, "devices_per_process": ns.devices_per_process,
                    "coordinator": self.address, "command": ["jaxplace", "launch", *sys.argv[2:]],
                    "process_command": ["jaxplace", *self.command[3:]], "cwd": os.getcwd(),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "status": "running",
                    "processes": [], "first_failure": None, "exit_code": None}

    def env(self, i: int) -> dict:
        env = dict(os.environ)
        env.update(JAX_COORDINATOR_ADDRESS=self.address, JAX_COORDINATOR_BIND_ADDRESS=self.address,
                   JAXPLACE_LAUNCH_COORDINATOR=self.address, JAXPLACE_PROCESS_INDEX=str(i),
                   JAXPLACE_PROCESS_COUNT=str(self.n), PYTHONUNBUFFERED="1")
        env.pop("JAXPLACE_JOB_ID", None)
        return env

    def run(self) -> int:
        from jaxplace_cli.store.layout import write_job

        write_job(self.job_dir, self.doc)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            die_with_parent = _die_with_parent()
            for i in range(self.n):  # every fork before any reader thread starts (preexec_fn)
                r, w = os.pipe()  # stop requests (capture/distributed.py watch_launch)
                env = dict(self.env(i), JAXPLACE_LAUNCH_CONTROL_FD=str(r))
                try:
                    self.procs.append(subprocess.Popen(
                        self.command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, process_group=0, preexec_fn=die_with_parent,
                        pass_fds=(r,)))
                finally:
                    os.close(r)
                self.controls.append(w)
            readers = [threading.Thread(target=self._pump, args=(i, stream, fd), daemon=True)
                       for i, p in enumerate(self.procs) for stream, fd in ((p.stdout, 1), (p.stderr, 2))]
            for t in readers:
                t.start()
            self._wait()
            for t in readers:
                t.join(timeout=2.0)  # a grandchild may still hold a pipe open
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            for w in self.controls:
                os.close(w)
            self._finish(write_job)
        return self.exit_code()

    def _on_signal(self, signum, frame) -> None:
        first = not self.signals
        self.signals.append(signum)
        if not first:  # asked twice: no more grace
            self._kill_groups()
        elif signum == signal.SIGINT:
            self._stop(f"launch interrupted by {signal.Signals(signum).name}")
        else:  # SIGTERM: passed on as it came (a preemption notice to JAX); SIGKILL after the grace
            for p in self._alive():
                try:
                    p.send_signal(signum)
                except ProcessLookupError:
                    pass
            self.stopping_since = time.monotonic()

    def _alive(self) -> list[subprocess.Popen]:
        return [p for p, end in zip(self.procs, self.ends) if end is None and p.poll() is None]

    def _wait(self) -> None:
        while True:
            for i, p in enumerate(self.procs):
                if self.ends[i] is None and p.poll() is not None:
                    self._ended(i, p.returncode)
            if all(e is not None for e in self.ends):
                return
            if self.stopping_since is not None and time.monotonic() - self.stopping_since > self.ns.grace:
                self._kill_groups()
            time.sleep(POLL_S)

    def _ended(self, i: int, returncode: int) -> None:
        code = 128 - returncode if returncode < 0 else returncode
        sig = signal.Signals(-returncode).name if returncode < 0 and -returncode in signal.valid_signals() else None
        stopped = self.stopping_since is not None  # launch had asked it to stop
        self.ends[i] = {"index": i, "pid": self.procs[i].pid, "exit_code": code, "signal": sig,
                        "stopped_by_launch": stopped and code != 0,
                        "seconds": round(time.monotonic() - self.t0, 3)}
        if code != 0 and self.first_failure is None:
            self.first_failure = (i, code)
            if not self.signals:  # (what describe_end says, without importing analysis first)
                self._stop(f"process {i} failed first: " + (f"killed by {sig}" if sig else f"exit {code}"))

    def _stop(self, reason: str) -> None:
        """SIGINT to the group of every process still running (what Ctrl-C at a terminal sends:
        ``jaxplace run`` saves the run, then dies of it); SIGKILL to the group after the grace.

        Not SIGTERM: once ``jax.distributed`` is initialised, JAX's preemption notifier takes
        SIGTERM for a preemption notice (it logs "SIGTERM caught" and the process goes on,
        waiting for a sync point its dead peer will never reach) — measured with JAX 0.10.2."""
        for p, w in zip(self.procs, self.controls):
            if p in self._alive():
                try:
                    os.killpg(p.pid, signal.SIGINT)
                    os.write(w, reason.encode() + b"\n")  # a process blocked in JAX saves from another thread
                except (ProcessLookupError, PermissionError, BrokenPipeError):
                    pass
        self.stopping_since = time.monotonic()

    def _kill_groups(self) -> None:
        for p in self._alive():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _pump(self, i: int, stream, fd: int) -> None:
        """Copy one child's stream to ours, each line prefixed with ``[p<i>] ``."""
        out = (sys.stdout if fd == 1 else sys.stderr).buffer
        prefix = f"[p{i}] ".encode()
        for line in iter(stream.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            with self.locks[fd]:
                try:
                    out.write(prefix + line)
                    out.flush()
                except (OSError, ValueError):
                    pass  # our own output closed: keep draining so the child never blocks
        stream.close()

    def exit_code(self) -> int:
        if self.first_failure is not None:
            return self.first_failure[1]
        return 0  # interrupted, but every process handled it and exited 0

    def _finish(self, write_job) -> None:
        self.doc.update(processes=[e for e in self.ends if e is not None],
                        first_failure=None if self.first_failure is None else
                        {"index": self.first_failure[0], "exit_code": self.first_failure[1]},
                        exit_code=self.exit_code(), ended=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        status="complete" if self.exit_code() == 0 else
                        "interrupted" if self.signals else "failed",
                        signals=[signal.Signals(s).name for s in self.signals])
        try:
            write_job(self.job_dir, self.doc)
        except OSError as exc:
            print(f"jaxplace: could not write {self.job_dir}/job.json: {exc}", file=sys.stderr)

    def summary_lines(self) -> list[str]:
        from jaxplace_cli.analysis.distributed import describe_end

        ends = [e for e in self.ends if e is not None]
        lines = []
        if self.first_failure is None and not self.signals:
            lines.append(f"jaxplace: launch: {self.n} processes exited 0")
        else:
            if self.first_failure is not None:
                i, code = self.first_failure
                lines.append(f"jaxplace: launch: process {i} failed first ({describe_end(self.ends[i])})"
                             + ("" if self.signals else "; the others were stopped"))
            if self.signals:
                lines.append("jaxplace: launch: interrupted by "
                             + ", ".join(signal.Signals(s).name for s in self.signals))
            for e in ends:
                if e["exit_code"] != 0 and (self.first_failure is None or e["index"] != self.first_failure[0]):
                    lines.append(f"jaxplace: launch: process {e['index']}: {describe_end(e)}")
        lines.append(f"jaxplace: job saved to {self.job_dir}; audit it with: jaxplace audit {self.job_dir}")
        return lines


def _die_with_parent():
    """Linux: a preexec_fn that makes the child get SIGTERM when launch dies (even of SIGKILL),
    so no process of the job is left waiting for peers that are gone. Loaded here, in the
    parent: the child between fork and exec must not import anything."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
