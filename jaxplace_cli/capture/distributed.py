"""``jaxplace run`` inside one process of a ``jax.distributed`` job.

Every process of the job runs ``jaxplace run --out JOB ...`` (``jaxplace launch`` does it for
local jobs; ``srun``/``mpirun``/a Kubernetes Job on a cluster) and records into its own
``JOB/proc-<i>/`` — its own store, writer and trace, nothing shared but the parent directory,
so processes never contend for a file and a process that dies leaves the others' stores
whole. ``jaxplace audit JOB`` merges them (analysis/distributed.py).

Which process this is must be known *before* the script runs (the store is created first), so
it comes from the environment of the launcher, never from JAX:

==========================  =========================================  =================
launcher                    index / count                              job key
==========================  =========================================  =================
``jaxplace launch``         ``JAXPLACE_PROCESS_INDEX`` / ``_COUNT``     (launch gives --out)
anything else, by the user  ``JAXPLACE_PROCESS_INDEX`` / ``_COUNT``     ``JAXPLACE_JOB_ID``
SLURM ``srun``              ``SLURM_PROCID`` / ``SLURM_NTASKS``         ``SLURM_JOB_ID.SLURM_STEP_ID``
Open MPI ``mpirun``         ``OMPI_COMM_WORLD_RANK`` / ``_SIZE``        ``OMPI_MCA_ess_base_jobid``
MPICH / Intel MPI (PMI)     ``PMI_RANK`` / ``PMI_SIZE``                 —
GKE TPU                     ``TPU_WORKER_ID`` / ``TPU_WORKER_HOSTNAMES``  —
==========================  =========================================  =================

A job of one process (count 1) records as an ordinary run (except under ``jaxplace launch -n 1``,
whose job directory is already made). Without ``--out``, a job with a
job key records into ``jaxplace-runs/<script>-<key>/`` (the same directory in every process);
without a key every process would pick its own timestamped directory, so the run summary
says to pass ``--out``.

Device names: JAX's own global device ids (``cpu:0``, ``cpu:2048``), which ``device_label``
already uses. They are unique across the processes of a job (CPU: ``cpu:0``, ``cpu:1``,
``cpu:2048``, ``cpu:2049`` for 2 processes x 2 devices, measured on JAX 0.10.2; GPU and TPU
ids are global too), they are what the
script itself sees in ``jax.devices()`` in every process, and a run recorded before this
module existed names its devices the same way. The manifest maps each device to its process
(``devices[].process``), which is how the merged audit shows ``p1`` next to ``cpu:2048``.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from jaxplace_cli.capture import native
from jaxplace_cli.store.layout import MANIFEST, RunDirError, default_run_dir, process_run_dir
from jaxplace_cli.store.writer import ServiceThread

PROCESS_INDEX = "JAXPLACE_PROCESS_INDEX"
PROCESS_COUNT = "JAXPLACE_PROCESS_COUNT"
JOB_ID = "JAXPLACE_JOB_ID"
LAUNCH_COORDINATOR = "JAXPLACE_LAUNCH_COORDINATOR"  # jaxhooks/cluster.py reads the same name
CONTROL_FD = "JAXPLACE_LAUNCH_CONTROL_FD"  # the read end of launch's stop pipe
STATUS_FD = "JAXPLACE_LAUNCH_STATUS_FD"  # the write end of this process's status pipe to launch
STUCK_S = 1.0  # after a stop request, how long the main thread gets to act on the SIGINT
HEARTBEAT_S = 0.5  # how often the recorded event count goes to launch (its --timeout's clock)
_status = {"fd": None, "ended": None}  # the status pipe, and the script's exit code once it ended


@dataclass
class JobProcess:
    """This process's place in a distributed job, as its launcher's environment says."""

    index: int
    count: int | None  # None: the launcher does not say (the manifest gets JAX's at the end)
    source: str  # which launcher's variables said so
    job_id: str = ""
    coordinator: str = ""  # the launch's coordinator (jaxplace launch only)

    def manifest(self) -> dict:
        return {"process_index": self.index, "process_count": self.count, "source": self.source,
                "job_id": self.job_id, "coordinator": self.coordinator or None,
                "initialized": False}


def _int(env, key) -> int | None:
    v = env.get(key, "").strip()
    return int(v) if v.isdigit() else None


def detect_process(env=None) -> JobProcess | None:
    """This process's index in a job of more than one process; None for an ordinary run."""
    env = os.environ if env is None else env
    found = None
    if _int(env, PROCESS_INDEX) is not None:
        source = "jaxplace launch" if env.get(LAUNCH_COORDINATOR) else PROCESS_INDEX
        found = JobProcess(_int(env, PROCESS_INDEX), _int(env, PROCESS_COUNT), source,
                           env.get(JOB_ID, ""), env.get(LAUNCH_COORDINATOR, ""))
    elif _int(env, "SLURM_PROCID") is not None and _int(env, "SLURM_NTASKS") is not None \
            and "SLURM_STEP_ID" in env:  # a task of an srun step (not the batch script itself)
        found = JobProcess(_int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"), "SLURM",
                           f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}")
    elif _int(env, "OMPI_COMM_WORLD_RANK") is not None:
        found = JobProcess(_int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE"),
                           "Open MPI", env.get("OMPI_MCA_ess_base_jobid", ""))
    elif _int(env, "PMI_RANK") is not None:
        found = JobProcess(_int(env, "PMI_RANK"), _int(env, "PMI_SIZE"), "PMI (MPICH, Intel MPI)")
    elif _int(env, "TPU_WORKER_ID") is not None and env.get("TPU_WORKER_HOSTNAMES"):
        found = JobProcess(_int(env, "TPU_WORKER_ID"),
                           len(env["TPU_WORKER_HOSTNAMES"].split(",")), "GKE TPU")
    if found is None or (found.count is not None and found.index >= found.count):
        return None
    if found.count == 1 and not found.coordinator:
        return None  # a job of one process records as an ordinary run (launch -n 1 keeps JOB/proc-0/)
    return found


def default_out(target: str, job: JobProcess | None) -> Path:
    """Where a run goes without ``--out``: one directory for the whole job when it has a key.
    A program read from stdin (``-``) is named ``stdin``."""
    target = "stdin" if target == "-" else target
    if job is not None and job.job_id:
        key = re.sub(r"[^A-Za-z0-9_.-]+", "_", job.job_id)[:64]
        stem = Path(target).stem if "/" in target or target.endswith(".py") else target
        return Path("jaxplace-runs") / (re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) + f"-job{key}")
    return default_run_dir(target)


def process_out(out: Path, job: JobProcess | None) -> Path:
    """The directory this process records into: ``OUT/proc-<i>/`` in a job, else ``OUT``."""
    if job is None:
        return Path(out)
    if (Path(out) / MANIFEST).is_file():
        raise RunDirError(f"--out {out} holds a single-process run; a job of {job.count or 'several'} "
                          f"processes needs a new directory")
    return process_run_dir(out, job.index)


def before_script(job: JobProcess | None, session=None) -> None:
    """Under ``jaxplace launch``: let ``jax.distributed.initialize()`` find the launch's
    coordinator, count and index (jaxhooks/cluster.py), and watch the launch's stop request
    (``watch_launch``). Called before the script runs; the coordinator is registered as JAX
    is imported (now, if it is)."""
    if job is None or not job.coordinator:
        return
    from jaxplace_cli.capture.import_hook import after_import

    after_import("jax", _register_cluster)
    _status["ended"] = None  # this session's script has not ended
    fd = _int(os.environ, CONTROL_FD)
    status = _int(os.environ, STATUS_FD)
    # the descriptors are this process's alone: a child Python (subprocess, --follow-children)
    # must not take whatever it has under those numbers for launch's pipes
    os.environ.pop(CONTROL_FD, None)
    os.environ.pop(STATUS_FD, None)
    if status is not None and session is not None:
        try:
            os.set_inheritable(status, False)
            _status["fd"] = status
            ServiceThread(target=_heartbeat, args=(session,), daemon=True,  # joined by nobody: see its doc
                          name="jaxplace-launch-heartbeat").start()
        except OSError:
            pass
    if fd is not None and session is not None:
        try:
            os.set_inheritable(fd, False)  # the script's own children do not get it
        except OSError:
            return
        ServiceThread(target=watch_launch, args=(fd, session), daemon=True,
                      name="jaxplace-launch-watch").start()


def _send(line: str) -> bool:
    fd = _status["fd"]
    if fd is None:
        return False
    try:
        os.write(fd, (line.replace("\n", " ")[:1000] + "\n").encode("utf-8", "replace"))
        return True
    except OSError:  # launch is gone (or never read it): nothing to tell
        _status["fd"] = None
        return False


def _register_cluster() -> None:
    from jaxplace_cli.capture.jaxhooks.cluster import register  # imports JAX's internals

    register()


def _heartbeat(session) -> None:
    """Tell launch how many events this process has recorded, every ``HEARTBEAT_S``: a count
    that stops growing for longer than ``jaxplace launch --timeout`` names the process hung.
    (The recorder's counts grow as the writer takes rows, every 0.25 s.)"""
    main = threading.main_thread().ident
    while _status["ended"] is None:
        rec = getattr(session, "recorder", None)
        counts = getattr(rec, "counts", None) or {}
        where = "jax" if _in_jax(sys._current_frames().get(main)) else "script"
        if not _send(f"progress {counts.get('ops', 0) + counts.get('transfers', 0)} {where}"):
            return
        time.sleep(HEARTBEAT_S)


def _in_jax(frame) -> bool:
    """Whether the main thread is inside a call into JAX (waiting for a device or a collective)
    rather than in the script's own code: when every process stops, the one that hangs is the
    one whose script stopped, not its peers waiting in a collective for it. By the innermost
    Python frame's file, and, where that is the script's, by the main thread's ``tls.depth``
    (``_native.main_depth``): the hooks are C, so a process blocked in a recorded ``step(x)``
    shows the script's own line innermost (launch then named either process of
    tests/test_launch_faults.py's hang hung: bench/README.md round 16) — unless the script's code is itself
    running inside the call (a trace, ``__jax_array__``, a callback: JAX's or the hooks' frames
    further out), which is the script's."""
    if frame is None:
        return False
    if _jax_file(frame.f_code.co_filename, f"{os.sep}jaxplace_cli{os.sep}"):
        return True
    depth = getattr(native.module(), "main_depth", None)
    if depth is None or not depth():
        return False
    f = frame.f_back
    while f is not None:
        if _jax_file(f.f_code.co_filename, f"{os.sep}jaxhooks{os.sep}"):
            return False
        f = f.f_back
    return True


def _jax_file(name: str, own: str) -> bool:
    return any(part in name for part in (f"{os.sep}jax{os.sep}", f"{os.sep}jaxlib{os.sep}", own))


def script_ended(exit_code: int, error: str) -> None:
    """Tell launch how the script ended, once its run is saved — before python's exit, which in
    a ``jax.distributed`` job waits in JAX's shutdown for every peer (a failed process would
    otherwise look alive to launch for as long as its peers run, or for ever when they are
    blocked waiting for it)."""
    _status["ended"] = exit_code
    _send("ended " + json.dumps({"exit_code": exit_code, "error": error}))


def watch_launch(fd: int, session, stuck_s: float = STUCK_S) -> None:
    """Save the run when launch asks this process to stop and the script cannot.

    Launch stops a process with SIGINT (cli/launch.py) and writes why into this pipe (or the
    pipe closes: launch died). Python acts on a signal only in the main thread, between
    bytecodes; a main thread blocked in a collective whose peer died never gets there
    (measured: a 2-process gloo job, the survivor blocked in the next jit call for as long as
    it was watched, its other threads running). So if the session has not started saving
    ``stuck_s`` seconds after the request, this thread saves it — status ``interrupted``, the
    reason in ``error`` — and ends the process (exit 130, as the SIGINT would have).

    A process whose script has ended (``script_ended``: its run saved) but which is still
    here may wait in JAX's shutdown for peers that launch is stopping: once its main thread is
    there (``_in_jax_teardown``) for 0.1 s it exits with the script's own code. Until then it is
    python's exit at work — the script's atexit handlers (a checkpoint saved on Ctrl-C) run as
    long as they take, as under python; they were cut 0.1 s after the run was saved."""
    try:
        reason = os.read(fd, 512).decode("utf-8", "replace").strip() or "jaxplace launch ended"
    except OSError:
        return
    deadline = time.monotonic() + stuck_s
    while time.monotonic() < deadline and not session._finalized:
        time.sleep(0.05)
    if not session._finalized:
        from jaxplace_cli.capture.runner import Outcome

        session.finalize(Outcome("interrupted", 130, f"stopped by jaxplace launch ({reason[:200]}) "
                                                     "while the script was blocked in JAX"))
        _exit(130)
    while _status["ended"] is None:  # the main thread is saving the run (on the SIGINT, or done)
        time.sleep(0.05)
    main, stuck = threading.main_thread().ident, 0
    while stuck < 2:  # python's own exit, if it is not blocked (its lines are written)
        time.sleep(0.05)
        stuck = stuck + 1 if _in_jax_teardown(sys._current_frames().get(main)) else 0
    _exit(_status["ended"])


def _in_jax_teardown(frame) -> bool:
    """Whether the main thread, after the script, is past the script's own code: no Python
    frame (the interpreter's teardown, or an atexit handler in C) or in one of JAX's own atexit
    handlers (``jax._src.api.clean_up``: ``distributed.shutdown`` waits for every peer). The
    outermost frame that is neither jaxplace's (``runner.exit_like_python`` runs the handlers on
    a Ctrl-C) nor runpy's is the handler running, or the script's."""
    if frame is None:
        return True
    outer = None
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_OWN) or name.startswith("<frozen") or os.path.basename(name) == "runpy.py"):
            outer = name
        frame = frame.f_back
    jax = sys.modules.get("jax")
    return outer is not None and outer.startswith(os.path.dirname(getattr(jax, "__file__", None) or "/-") + os.sep)


_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # jaxplace_cli/


def _exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def own_devices(devices: list[dict]) -> list[dict]:
    """The devices of this process (each process of a job lists the job's global devices):
    what ``--devices N`` asked for is N of these, not of the job's."""
    here = 0
    if devices and "jax" in sys.modules:
        try:
            import jax

            here = jax.process_index()
        except Exception:
            return devices
    return [d for d in devices if d.get("process", here) == here]


def finish(manifest: dict, job: JobProcess | None) -> None:
    """Add what ``jax.distributed`` was initialised with to the manifest (``distributed``); a
    run of one process that never initialised it gets no such key."""
    state = None
    if "jax" in sys.modules:
        from jaxplace_cli.capture.jaxhooks.cluster import state as jax_state

        state = jax_state()
    if job is None and state is None:
        return
    section = job.manifest() if job is not None else {"source": "jax.distributed.initialize"}
    if state is not None:
        section.update(state, initialized=True)
        if job is not None and state["process_index"] != job.index:
            section["note"] = (f"JAX says process {state['process_index']}, the launcher said "
                               f"{job.index} (the directory's name)")
    names = {d.get("name") for d in manifest.get("devices", []) if isinstance(d, dict)}
    here = section.get("process_index")
    section["local_devices"] = sorted(
        (d["name"] for d in manifest.get("devices", []) if isinstance(d, dict) and d.get("process") == here),
        key=_device_order) if names else []
    manifest["distributed"] = section


def _device_order(name: str):
    kind, _, num = name.partition(":")
    return (kind, int(num) if num.isdigit() else 0, name)
