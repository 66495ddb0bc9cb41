"""One audit of a ``jax.distributed`` job: its processes' runs (``JOB/proc-<i>/``) merged.

Each process is audited as the run it is (``audit_run``); the job's result is their merge:

* totals, small and unknown-size counts, routes and transfer sites are sums over processes
  (devices carry JAX's global ids, so routes and device names never collide; a site is the
  same file:line in every process and its counts add up);
* ops per device: a jit call over a global mesh lists every device of the mesh in each
  process, but each process runs it only on its own devices, so a call is attributed to the
  calling process's devices (``cpu:2048,cpu:2049`` for process 1, not the mesh's four);
* steps are the first process's that has any; per-step transfers are summed over processes
  step by step (SPMD processes run the same steps) when every process has as many steps;
* findings of the processes are merged when the same rule fires at the same line in several
  (SPMD programs repeat them), and the job's own rules (``rules/distributed.py``) look across
  processes.

``JobView`` (``AuditResult.distributed``) keeps the per-process view: how each process ended
(``job.json`` from ``jaxplace launch``, else its manifest), its transfers, ops and steps, the
work per device, the jit calls that span processes (from the hooks) and the collectives in
each process's trace window (sources/collectives.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from jaxplace_cli.analysis import AuditResult, BudgetVerdict, audit_run
from jaxplace_cli.analysis.findings import RuleConfig, sort_findings
from jaxplace_cli.analysis.memory import merge_processes
from jaxplace_cli.analysis.merge import device_order, local_devices, merge_findings, merge_steps, merge_summaries
from jaxplace_cli.analysis.run import InputError, RunData, analyse, open_run
from jaxplace_cli.model.manifest import Manifest
from jaxplace_cli.store.layout import RunDirError, is_job_dir, process_dirs, read_job
from jaxplace_cli.store.reader import StoreError, reading

MAX_TRACE_BYTES = 256 * 2**20  # a process's trace larger than this is not read for collectives


@dataclass
class ProcessView:
    index: int
    path: str
    host: str = ""
    pid: int | None = None
    status: str = "?"  # the run's manifest status
    exit_code: int | None = None
    ended: str = ""  # how it ended, in words
    died: str = ""  # why it counts as dead or failed ("" = it did not)
    devices: list[str] = field(default_factory=list)  # its own (local) devices
    ops: int = 0
    dispatch_ns: int = 0
    totals: dict = field(default_factory=dict)  # kind -> KindTotal (>= min_bytes)
    small: dict = field(default_factory=dict)
    steps: int | None = None
    step_medians: dict = field(default_factory=dict)  # kind -> {"count", "bytes"}, steady state
    result: AuditResult | None = None  # None: the run could not be read
    error: str = ""


@dataclass
class DeviceWork:
    device: str
    process: int | None
    ops: int = 0
    dispatch_ns: int = 0


@dataclass
class Collective:
    process: int
    module: str
    kind: str
    count: int
    executions: int
    devices: int
    time_ns: int
    bytes_per_execution: int | None  # None: a size the trace does not state


@dataclass
class JobView:
    path: str
    process_count: int
    processes: list[ProcessView]
    missing: list[int] = field(default_factory=list)
    devices: list[DeviceWork] = field(default_factory=list)
    spanning_calls: list[dict] = field(default_factory=list)  # {"name", "process", "count"}
    collectives: list[Collective] = field(default_factory=list)
    coordinator: str = ""
    launcher: str = ""
    first_failure: int | None = None
    notes: list[str] = field(default_factory=list)


def is_job(path) -> bool:
    return is_job_dir(Path(path))


def describe_end(end: dict | None) -> str:
    """How a launched process ended, in words: ``exit 1``, ``killed by SIGKILL``."""
    if not end:
        return "did not end"
    if end.get("signal"):
        return f"killed by {end['signal']}" + (" from launch" if end.get("stopped_by_launch") else "")
    return f"exit {end.get('exit_code')}" + (" after launch stopped it" if end.get("stopped_by_launch") else "")


def open_job(path: Path) -> tuple[dict | None, list[tuple[int, Path]]]:
    try:
        job = read_job(path)
    except RunDirError as exc:
        raise InputError(str(exc)) from None
    dirs = process_dirs(path)
    if not dirs:
        raise InputError(f"{path} holds no process runs (proc-<i>/); the job recorded nothing")
    return job, dirs


def audit_job(path, cfg: RuleConfig, select=None, ignore=None, top_sites: int = 20) -> AuditResult:
    """The merged audit of a job directory (see the module docstring)."""
    from jaxplace_cli.analysis.rules.distributed import job_findings, job_selected

    path = Path(path)
    job, dirs = open_job(path)
    ends = {e.get("index"): e for e in (job or {}).get("processes", []) if isinstance(e, dict)}
    views, runs = [], []
    for index, d in dirs:
        view, manifest = ProcessView(index, str(d)), {}
        try:
            run = open_run(d)
            manifest = run.manifest.to_dict()  # the checked manifest, read as plain data
            with reading(d):
                view.result = analyse(run, lambda run=run: audit_run(run, cfg, select, ignore, top_sites=10_000))
            runs.append((view, run))
        except (InputError, StoreError) as exc:  # one unreadable run: the others still audit
            view.error = str(exc)
        _describe(view, manifest, ends.get(index))
        views.append(view)
    if not runs:
        raise InputError(f"{path}: no process run could be read ({views[0].error})")
    owner = _device_owners(r.manifest.to_dict() for _, r in runs)
    for view, run in runs:
        _fill(view, run, owner)
    view = _job_view(path, job, views, runs, owner)
    merged = merge_results(path, views, job, top_sites, owner)
    merged.distributed = view
    merged.notes += view.notes
    merged.findings = sort_findings(merge_findings(views) + job_findings(view, cfg, select, ignore))
    merged.rules_checked = list(merged.rules_checked) + job_selected(select, ignore)
    return merged


def _describe(view: ProcessView, m: dict, end: dict | None) -> None:
    view.host, view.pid = str(m.get("host", "")), m.get("pid")
    view.status, view.exit_code = str(m.get("status", "unreadable" if view.error else "?")), m.get("exit_code")
    # the exception line the script ended with, as launch heard it (its run.json says the same
    # when it could be saved)
    error = str((end or {}).get("error") or m.get("error") or "")[:200]
    if end is not None:
        view.ended = describe_end(end)
        if end.get("hung"):  # launch's --timeout: it recorded nothing for too long
            view.died = f"{str(end['hung'])[:200]}; launch stopped it ({view.ended})"
        elif not end.get("stopped_by_launch") and end.get("exit_code"):
            view.died = view.ended + (f" ({error})" if error and not end.get("signal") else "")
    elif view.status == "running":
        view.ended = "did not finish (its manifest still says running: killed, or still running)"
        view.died = view.ended
    else:
        view.ended = f"{view.status} (exit {view.exit_code})"
        if view.status in ("failed", "terminated"):
            view.died = view.ended + (f": {error}" if error else "")


def _device_owners(manifests) -> dict[str, int]:
    """Global device name -> process index, from every manifest's device list (each process
    lists the job's global devices, with their process)."""
    owner: dict[str, int] = {}
    for m in manifests:
        for d in m.get("devices", []) or []:
            if isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("process"), int):
                owner.setdefault(d["name"], d["process"])
    return owner


def _fill(view: ProcessView, run: RunData, owner: dict[str, int]) -> None:
    r = view.result
    s = r.summary
    view.devices = sorted((d for d, p in owner.items() if p == view.index), key=device_order)
    view.ops, view.dispatch_ns = s.ops_total, sum(d.dispatch_ns for d in s.ops_by_device)
    view.totals, view.small = s.totals, s.small
    if r.steps is not None and r.steps.steps:
        view.steps = len(r.steps.steps)
        for kind, st in r.step_transfers.items():
            d = st.summary(r.steps.warmup)
            view.step_medians[kind] = {"count": d["median"], "bytes": d["bytes_median"]}


def _job_view(path: Path, job: dict | None, views, runs, owner) -> JobView:
    counts = [((r.manifest.distributed or {}).get("process_count")) for _, r in runs]
    expected = max([c for c in counts if isinstance(c, int)] + [(job or {}).get("process_count") or 0]
                   + [v.index + 1 for v in views])
    present = {v.index for v in views}
    jv = JobView(str(path), expected, views, missing=[i for i in range(expected) if i not in present][:100])
    first = (job or {}).get("first_failure") or {}
    jv.first_failure = first.get("index") if isinstance(first, dict) else None
    dist = [(r.manifest.distributed or {}) for _, r in runs]
    jv.coordinator = str((job or {}).get("coordinator") or next((d.get("coordinator") for d in dist if d.get("coordinator")), ""))
    jv.launcher = "jaxplace launch" if job else str(next((d.get("source") for d in dist if d.get("source")), ""))
    work: dict[str, DeviceWork] = {}
    for view, _ in runs:
        for d in view.result.summary.ops_by_device:
            for name in local_devices(d.device, view.index, owner).split(","):
                w = work.setdefault(name, DeviceWork(name, owner.get(name)))
                w.ops += d.count
                w.dispatch_ns += d.dispatch_ns
            names = [x for x in d.device.split(",") if x]
            if any(owner.get(x) not in (None, view.index) for x in names):
                for name, n in d.top:
                    jv.spanning_calls.append({"name": name, "process": view.index, "count": n,
                                              "devices": len(names)})
    jv.devices = sorted(work.values(), key=lambda w: device_order(w.device))
    jv.collectives, jv.notes = _collectives(views)
    alone = [v.index for (v, _), d in zip(runs, dist) if d and d.get("initialized") is False and v.status != "running"]
    if alone:
        jv.notes.append(f"process(es) {', '.join(map(str, alone))} never called jax.distributed.initialize: "
                        "each used only its own devices, whose names repeat across processes (cpu:0 "
                        "in each), so per-device counts of the merged tables add up different devices")
    return jv


def _collectives(views) -> tuple[list[Collective], list[str]]:
    from jaxplace_cli.sources.collectives import read_collectives
    from jaxplace_cli.sources.xplane import TraceError, find_trace_files

    out, notes, untraced = [], [], []
    for v in views:
        if v.result is None:
            continue
        try:
            files = [f for f in find_trace_files(v.path) if f.stat().st_size <= MAX_TRACE_BYTES]
        except (TraceError, OSError):
            files = []
        if not files:
            untraced.append(v.index)
        for f in files:
            try:
                stats = read_collectives(f)
            except TraceError as exc:
                notes.append(f"p{v.index}: its trace could not be read for collectives ({exc})")
                continue
            for c in stats:
                per = c.bytes // c.executions if c.executions and not c.unknown_size else None
                out.append(Collective(v.index, c.module, c.kind, c.count, c.executions, len(c.devices),
                                      c.time_ns, per))
    if untraced and len(untraced) < len(views):
        notes.append("collectives: no trace window in process(es) " + ", ".join(map(str, untraced)))
    return out, notes


def merge_results(path: Path, views, job: dict | None, top_sites: int, owner: dict) -> AuditResult:
    """One AuditResult whose summary, steps and notes are the processes' merged."""
    ok = [v for v in views if v.result is not None]
    first = ok[0].result
    manifest = first.manifest.to_dict()
    manifest.update(status=(job or {}).get("status") or _job_status(views),
                    exit_code=(job or {}).get("exit_code", manifest.get("exit_code")))
    manifest = Manifest.from_dict(manifest, str(path))  # ManifestError: a job.json of other values
    notes = [f"a jax.distributed job of {len(views)} processes; the tables are all processes merged "
             f"(per process: the section at the end, or jaxplace audit {path}/proc-<i>)"]
    for v in views:
        if v.result is None:
            notes.append(f"p{v.index}: its run cannot be read: {v.error}")
        else:
            notes += [f"p{v.index}: {n}" for n in v.result.notes]
    summary = merge_summaries([(v.result.summary, v.index) for v in ok], top_sites, owner)
    steps, step_transfers = merge_steps(ok, notes)
    memory = merge_processes([(v.index, v.result.memory) for v in ok if v.result.memory is not None])
    return AuditResult("run", str(path), manifest, summary, [], notes, steps, step_transfers,
                       rules_checked=list(first.rules_checked), rules_unsupported=dict(first.rules_unsupported),
                       memory=memory)


def _job_status(views) -> str:
    if any(v.died for v in views):
        return "failed"
    return "complete" if all(v.status == "complete" for v in views) else views[0].status


def job_verdict(result: AuditResult, budget, min_bytes: int, check, total_breaches) -> BudgetVerdict:
    """Every limit per process (a breach names the process), and the ``[total]`` limits over
    the job (analysis/budget_total.py)."""
    per_process = replace(budget, total={})
    breaches, parts = [], []
    for v in result.distributed.processes:
        if v.result is None:
            continue
        run = open_run(Path(v.path))
        parts.append((v.result, run))
        for b in check(v.result, run, per_process, min_bytes):
            breaches.append(replace(b, message=f"p{v.index}: {b.message}"))
    breaches += total_breaches(parts, budget, min_bytes)
    return BudgetVerdict(budget.source, budget.limit_names(), breaches)


def job_dict(view: JobView) -> dict:
    """The ``distributed`` object of the audit JSON (docs/audit-json-schema.md)."""
    def kinds(d):
        return {k: {"count": v.count, "bytes": v.bytes} for k, v in d.items()}

    return {
        "process_count": view.process_count, "launcher": view.launcher,
        "coordinator": view.coordinator or None, "first_failure": view.first_failure,
        "missing": list(view.missing),
        "processes": [{
            "index": v.index, "path": v.path, "host": v.host, "pid": v.pid, "status": v.status,
            "exit_code": v.exit_code, "ended": v.ended, "died": v.died or None,
            "devices": list(v.devices), "error": v.error or None,
            "ops": {"total": v.ops, "dispatch_ns": v.dispatch_ns},
            "transfers": {"totals": kinds(v.totals), "small": kinds(v.small)},
            "steps": v.steps, "per_step_median": dict(v.step_medians),
        } for v in view.processes],
        "devices": [{"device": w.device, "process": w.process, "ops": w.ops, "dispatch_ns": w.dispatch_ns}
                    for w in view.devices],
        "spanning_calls": [dict(c) for c in view.spanning_calls],
        "collectives": [{"process": c.process, "module": c.module, "kind": c.kind, "count": c.count,
                         "executions": c.executions, "devices": c.devices, "time_ns": c.time_ns,
                         "bytes_per_execution": c.bytes_per_execution} for c in view.collectives],
        "notes": list(view.notes),
    }
