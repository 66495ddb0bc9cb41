"""One ``jaxplace launch`` job as it runs: its processes, their output and how each script
ended, and ``job.json`` (the command line is cli/launch.py's)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from jaxplace_cli.model.safe import plain
from jaxplace_cli.report.run_lines import say

POLL_S = 0.05
HUNG_EXIT = 124  # a job stopped because a process hung exits as timeout(1) does


def free_port() -> int:
    """A port nothing listens on now (the coordinator binds it a moment later, as torchrun's
    does: another program could take it in between, then process 0 fails to bind and says so)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        self.reported: list[dict | None] = [None] * self.n  # how each script ended, as it said
        self.progress: list[tuple | None] = [None] * self.n  # (events, when they last grew, jax|script)
        self.started: float | None = None  # when every process had started recording
        self.first_failure: dict | None = None  # {"index", "exit_code"[, "error"][, "hung"]}
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
        statuses = []
        try:
            die_with_parent = _die_with_parent()
            for i in range(self.n):  # every fork before any reader thread starts (preexec_fn)
                r, w = os.pipe()  # stop requests (capture/distributed.py watch_launch)
                sr, sw = os.pipe()  # how the script ended, and its progress (script_ended, _heartbeat)
                env = dict(self.env(i), JAXPLACE_LAUNCH_CONTROL_FD=str(r), JAXPLACE_LAUNCH_STATUS_FD=str(sw))
                try:
                    self.procs.append(subprocess.Popen(
                        self.command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, process_group=0, preexec_fn=die_with_parent,
                        pass_fds=(r, sw)))
                finally:
                    os.close(r)
                    os.close(sw)
                self.controls.append(w)
                statuses.append(os.fdopen(sr, "rb"))
            readers = [threading.Thread(target=self._pump, args=(i, stream, fd), daemon=True)
                       for i, p in enumerate(self.procs) for stream, fd in ((p.stdout, 1), (p.stderr, 2))]
            readers += [threading.Thread(target=self._listen, args=(i, f), daemon=True)
                        for i, f in enumerate(statuses)]
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

    def _listen(self, i: int, stream) -> None:
        """Process i's status pipe: ``progress N`` (events recorded so far), ``ended {json}``."""
        for line in iter(stream.readline, b""):
            word, _, rest = line.decode("utf-8", "replace").strip().partition(" ")
            count, _, where = rest.partition(" ")
            if word == "progress" and count.isdigit():
                if self.progress[i] is None or self.progress[i][0] != int(count):
                    self.progress[i] = (int(count), time.monotonic(), where)
                else:
                    self.progress[i] = (*self.progress[i][:2], where)
            elif word == "ended":
                try:
                    end = json.loads(rest)
                    self.reported[i] = {"exit_code": int(end["exit_code"]), "error": str(end.get("error") or "")}
                except (ValueError, KeyError, TypeError):
                    pass
        stream.close()

    def _wait(self) -> None:
        while True:
            for i, p in enumerate(self.procs):
                if self.ends[i] is None and p.poll() is not None:
                    self._ended(i, p.returncode)
            if all(e is not None for e in self.ends):
                return
            self._watch()
            if self.stopping_since is not None and time.monotonic() - self.stopping_since > self.ns.grace:
                self._kill_groups()
            time.sleep(POLL_S)

    def _watch(self) -> None:
        """The scripts, as torchrun's agent watches its workers: a script that ended with an
        error (its process may still wait in JAX's shutdown for peers), or a process that
        recorded nothing for ``--timeout`` seconds, fails the job."""
        if self.first_failure is not None or self.stopping_since is not None:
            return
        for i, end in enumerate(self.reported):
            if end is not None and end["exit_code"] != 0:
                return self._failed(i, end["exit_code"], end["error"], f"exit {end['exit_code']}")
        waiting = [i for i in range(self.n) if self.ends[i] is None and self.reported[i] is None]
        if not self.ns.timeout or any(self.progress[i] is None for i in waiting):
            return  # the clock runs once every process records (a peer still starting is no hang)
        now = time.monotonic()
        self.started = self.started or now
        since = {i: max(self.progress[i][1], self.started) for i in waiting}
        stalled = [i for i in waiting if now - since[i] > self.ns.timeout / 2]
        if not any(now - since[i] > self.ns.timeout for i in stalled):
            return
        # its peers stop too, waiting in a collective for it: the hung one is the process whose
        # main thread is in the script's own code, else (all in JAX) the one that stopped first
        i = min(stalled, key=lambda k: (self.progress[k][2] == "jax", since[k]))
        why = f"hung: no event recorded for {now - since[i]:.0f} s (after {self.progress[i][0]:,} events)"
        self._failed(i, HUNG_EXIT, why, why, hung=True)

    def _failed(self, i: int, code: int, error: str, said: str, hung: bool = False) -> None:
        self.first_failure = {"index": i, "exit_code": code, **({"error": error} if error else {}),
                              **({"hung": True} if hung else {})}
        if not self.signals:  # (what describe_end says, without importing analysis first)
            self._stop(f"process {i} failed first: {said}")

    def _ended(self, i: int, returncode: int) -> None:
        code = 128 - returncode if returncode < 0 else returncode
        sig = signal.Signals(-returncode).name if returncode < 0 and -returncode in signal.valid_signals() else None
        said = self.reported[i]
        if said is not None:  # the script's own end (launch may have ended its wait in JAX's shutdown)
            code, sig = said["exit_code"], None
        stopped = self.stopping_since is not None  # launch had asked it to stop
        first = self.first_failure is not None and self.first_failure["index"] == i
        self.ends[i] = {"index": i, "pid": self.procs[i].pid, "exit_code": code, "signal": sig,
                        "stopped_by_launch": stopped and code != 0 and not (first and not self.first_failure.get("hung")),
                        "seconds": round(time.monotonic() - self.t0, 3)}
        if said is not None and said["error"]:
            self.ends[i]["error"] = said["error"]
        if first and self.first_failure.get("hung"):
            self.ends[i]["hung"] = self.first_failure["error"]
        if code != 0 and self.first_failure is None and not stopped:
            self._failed(i, code, "", f"killed by {sig}" if sig else f"exit {code}")

    def _stop(self, reason: str) -> None:
        """SIGINT to the group of every process still running (what Ctrl-C at a terminal sends:
        ``jaxplace run`` saves the run, then dies of it); SIGKILL to the group after the grace.
        A process whose script has ended (it said so: its run is saved, its lines written)
        and which is still here waits in JAX's shutdown for its peers, holding the GIL
        (measured: its own threads stop): it is killed first, before its peers' exit makes
        JAX abort it with a page of C++ stack; its exit code stays the script's.

        Not SIGTERM: once ``jax.distributed`` is initialised, JAX's preemption notifier takes
        SIGTERM for a preemption notice (it logs "SIGTERM caught" and the process goes on,
        waiting for a sync point its dead peer will never reach) — measured with JAX 0.10.2."""
        alive = self._alive()
        for ended in (True, False):
            for i, (p, w) in enumerate(zip(self.procs, self.controls)):
                if p not in alive or (self.reported[i] is not None) != ended:
                    continue
                try:
                    os.killpg(p.pid, signal.SIGKILL if ended else signal.SIGINT)
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
        out = getattr(sys.stdout if fd == 1 else sys.stderr, "buffer", None)  # None: closed
        prefix = f"[p{i}] ".encode()
        for line in iter(stream.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            if out is None:
                continue  # drained all the same, so the child never blocks on a full pipe
            with self.locks[fd]:
                try:
                    out.write(prefix + line)
                    out.flush()
                except (OSError, ValueError):
                    pass  # our own output closed: keep draining so the child never blocks
        stream.close()

    def exit_code(self) -> int:
        """The first failure's code; else, interrupted, the first non-zero code (130 for a Ctrl-C)."""
        if self.first_failure is not None:
            return self.first_failure["exit_code"]
        return next((e["exit_code"] for e in self.ends if e is not None and e["exit_code"]), 0)

    def _finish(self, write_job) -> None:
        self.doc.update(processes=[e for e in self.ends if e is not None],
                        first_failure=self.first_failure,
                        exit_code=self.exit_code(), ended=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        status="complete" if self.exit_code() == 0 else
                        "interrupted" if self.signals and self.first_failure is None else "failed",
                        signals=[signal.Signals(s).name for s in self.signals])
        try:
            write_job(self.job_dir, self.doc)
        except OSError as exc:
            say(f"jaxplace: could not write {self.job_dir}/job.json: {exc}")

    def summary_lines(self) -> list[str]:
        from jaxplace_cli.analysis.distributed import describe_end

        ends = [e for e in self.ends if e is not None]
        lines = []
        ff = self.first_failure
        if ff is None and not self.signals:
            lines.append(f"jaxplace: launch: {self.n} processes exited 0")
        else:
            if ff is not None:
                how = ff["error"] if ff.get("hung") else describe_end(self.ends[ff["index"]]) + (
                    f": {ff['error']}" if ff.get("error") else "")
                lines.append(f"jaxplace: launch: process {ff['index']} failed first ({plain(how)})"
                             + ("; the others were stopped" if self.n > 1 and self.stopping_since else ""))
            if self.signals:
                lines.append("jaxplace: launch: interrupted by "
                             + ", ".join(signal.Signals(s).name for s in self.signals))
            for e in ends:
                if e["exit_code"] != 0 and (ff is None or e["index"] != ff["index"]):
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
