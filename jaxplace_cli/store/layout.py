"""The run directory: layout, manifest (``run.json``) and how to recognise one.

::

    <run>/run.json          manifest: schema_version, argv, cwd, versions, devices, policy, outcome
    <run>/events.sqlite     jaxplace's events (store/schema.py, store/writer_process.py)
    <run>/plugins/profile/<session>/<host>.xplane.pb   the jax.profiler trace, if any
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.manifest import MANIFEST_SCHEMA_VERSION, Manifest, ManifestError
from jaxplace_cli.model.untrusted import MAX_MANIFEST_BYTES, load_json

MANIFEST = "run.json"
MANIFEST_RESERVE = ".manifest-reserve"  # room for the final run.json on a full disk (capture/session.py)
EVENTS = "events.sqlite"
CHILDREN = "children"  # <run>/children/<pid>/: runs of child processes (--follow-children)


class RunDirError(JaxplaceError):
    """A path that is not a usable run directory (usage error: exit code 2)."""


def default_run_dir(target: str, base: Path = Path("jaxplace-runs")) -> Path:
    """``jaxplace-runs/<script>-<timestamp>``; a numeric suffix keeps it unique."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(target).stem if "/" in target or target.endswith(".py") else target)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = base / f"{stem}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stem}-{stamp}-{n}"
    return path


def create_run_dir(path: Path) -> Path:
    """Create ``path`` for a new run; refuse to reuse a directory that already holds a run
    or anything else (a run is never overwritten)."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise RunDirError(f"--out {path} exists and is not a directory; choose a new path")
        if any(path.iterdir()):
            raise RunDirError(f"--out {path} already exists and is not empty; jaxplace never "
                              "overwrites a run, choose a new path")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".jaxplace-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise RunDirError(f"cannot write to run directory {path}: {exc.strerror or exc}") from None
    return path


def write_manifest(path: Path, manifest: Manifest) -> None:
    """Write ``run.json`` atomically (a reader never sees half a manifest)."""
    path = Path(path)
    tmp = path / (MANIFEST + ".tmp")
    data = manifest.to_dict() if hasattr(manifest, "to_dict") else manifest  # tests write dicts
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path / MANIFEST)
    except OSError:
        try:  # a full disk leaves no empty run.json.tmp behind
            tmp.unlink()
        except OSError:
            pass
        raise


def read_manifest(path: Path) -> Manifest:
    """``run.json`` of ``path``, bounded (``model/untrusted.py``) and checked field by field
    (``model/manifest.py``): every way it can be wrong is one ``RunDirError`` line."""
    file = Path(path) / MANIFEST
    if not os.path.lexists(file):
        if os.path.lexists(Path(path) / EVENTS):  # a store without its manifest: a damaged run
            raise RunDirError(f"{path} holds an events store but no {MANIFEST}: the run is damaged "
                              f"and cannot be audited; restore its {MANIFEST}, or audit its profiler "
                              f"trace alone (jaxplace audit {Path(path) / 'plugins' / 'profile'})")
        raise RunDirError(f"{path} is not a jaxplace run (no {MANIFEST}); pass a directory "
                          "made by `jaxplace run` or a jax.profiler trace")
    try:
        data = load_json(file, "manifest", MAX_MANIFEST_BYTES, RunDirError)
    except RunDirError as exc:
        raise RunDirError(f"{exc}; the manifest is unreadable or corrupt, the run is damaged and "
                          f"cannot be audited; restore its {MANIFEST}") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise RunDirError(f"{file} is not a jaxplace manifest (no schema_version)")
    if data["schema_version"] != MANIFEST_SCHEMA_VERSION:
        raise RunDirError(f"{file} has manifest schema_version {_show(data['schema_version'])}; this "
                          f"jaxplace reads version {MANIFEST_SCHEMA_VERSION}")
    try:
        return Manifest.from_dict(data, str(file))
    except ManifestError as exc:
        raise RunDirError(str(exc)) from None


def _show(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_run_dir(path: Path) -> bool:
    """A run is known by its manifest or by its store: a directory with ``events.sqlite`` but
    no readable ``run.json`` is a damaged run (``read_manifest`` says so), never a trace."""
    path = Path(path)
    return os.path.lexists(path / MANIFEST) or os.path.lexists(path / EVENTS)


# -- distributed jobs (capture/distributed.py, cli/launch.py, analysis/distributed.py) -----------
#
#     <job>/job.json          what `jaxplace launch` knows: processes, coordinator, exit codes
#     <job>/proc-<i>/         process i's run (run.json, events.sqlite, plugins/...)
#
# A job recorded without `jaxplace launch` (srun, mpirun, Kubernetes) has no job.json: its
# processes are found by their directories.

JOB = "job.json"
PROCESS_PREFIX = "proc-"
JOB_SCHEMA_VERSION = 1
MAX_PROCESSES = 4096  # an audit reads at most this many process directories (untrusted input)


def process_run_dir(job_dir: Path, index: int) -> Path:
    return Path(job_dir) / f"{PROCESS_PREFIX}{int(index)}"


def process_dirs(job_dir: Path) -> list[tuple[int, Path]]:
    """``(index, path)`` of every ``proc-<i>/`` directory of a job, by index (at most
    MAX_PROCESSES; names that are not ``proc-<digits>`` are ignored)."""
    out = []
    try:
        entries = list(Path(job_dir).iterdir())
    except OSError:
        return []
    for p in entries:
        tail = p.name[len(PROCESS_PREFIX):]
        if p.name.startswith(PROCESS_PREFIX) and tail.isdigit() and len(tail) < 8 and p.is_dir():
            out.append((int(tail), p))
    return sorted(out)[:MAX_PROCESSES]


def is_job_dir(path: Path) -> bool:
    """A distributed job: a ``job.json``, or no ``run.json`` but ``proc-<i>/run.json`` inside."""
    path = Path(path)
    if not path.is_dir() or is_run_dir(path):
        return False
    return (path / JOB).is_file() or any(is_run_dir(p) for _, p in process_dirs(path))


def write_job(path: Path, job: dict) -> None:
    """Write ``job.json`` atomically."""
    path = Path(path)
    tmp = path / (JOB + ".tmp")
    tmp.write_text(json.dumps(job, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path / JOB)


def read_job(path: Path) -> dict | None:
    """``job.json`` of a job directory; None when there is none; RunDirError when unreadable.

    Read as ``run.json`` is (``model/untrusted.py``: a regular file of at most 16 MiB, JSON of
    bounded depth) and checked field by field (``_check_job``): a FIFO hung the audit, a link
    to /dev/zero ate memory, and ``"processes": 5`` or a list as an index ended in exit 3."""
    file = Path(path) / JOB
    if not os.path.lexists(file):
        return None
    data = load_json(file, "job manifest", MAX_JOB_BYTES, RunDirError)
    if not isinstance(data, dict) or data.get("schema_version") != JOB_SCHEMA_VERSION:
        raise RunDirError(f"{file} is not a jaxplace job manifest of schema version {JOB_SCHEMA_VERSION}")
    _check_job(data, file)
    return data


MAX_JOB_BYTES = 16 * 2**20
_INT, _STR, _FLAG = (int, type(None)), (str, type(None)), (bool, str, type(None))
# the fields of job.json the audit reads (cli/launch_job.py writes them) and their types
JOB_FIELDS = {"process_count": _INT, "coordinator": _STR, "status": _STR, "exit_code": _INT,
              "processes": (list,), "first_failure": (dict, type(None))}
END_FIELDS = {"index": _INT, "pid": _INT, "exit_code": _INT, "signal": _STR, "error": _STR,
              "hung": _FLAG, "stopped_by_launch": _FLAG}


def _check_job(data: dict, file: Path) -> None:
    def check(obj: dict, fields: dict, where: str) -> None:
        for key, types in fields.items():
            value = obj.get(key)
            if key in obj and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
                raise RunDirError(f"{file}: {where}{key} is {type(value).__name__}, not "
                                  f"{' or '.join(t.__name__ for t in types if t is not type(None))}; "
                                  "the job manifest is corrupt")
            top = MAX_PROCESS_COUNT if key == "process_count" else 2**63 - 1
            if type(value) is int and not -2**63 <= value <= top:
                raise RunDirError(f"{file}: {where}{key} {value} is out of range; the job manifest is corrupt")

    check(data, JOB_FIELDS, "")
    for i, end in enumerate(data.get("processes") or []):
        if not isinstance(end, dict):
            raise RunDirError(f"{file}: processes[{i}] is {type(end).__name__}, not an object; "
                              "the job manifest is corrupt")
        check(end, END_FIELDS, f"processes[{i}].")
    check(data.get("first_failure") or {}, END_FIELDS, "first_failure.")


MAX_PROCESS_COUNT = 1 << 20  # the audit lists the processes missing below it
