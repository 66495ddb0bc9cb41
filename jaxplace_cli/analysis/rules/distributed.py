"""Rules over a whole ``jax.distributed`` job: what no single process's audit can see.

* ``process-died`` (error): a process was killed, failed, or never finished; a process that
  recorded nothing at all (no ``proc-<i>/``) is named too. What each one ended with comes from
  ``job.json`` (``jaxplace launch``) or the process's own manifest.
* ``process-idle`` (warning): a process dispatched under a tenth of the ops of the busiest one
  (which dispatched at least ``imbalance_min_ops``): its devices wait while the others work.
* ``single-process-io`` (warning): one process did every host->device (or device->host)
  transfer of at least ``min_bytes``, ``loop_threshold`` times or more, and the others none —
  the job's input (or output) goes through one host.
* ``unequal-step-transfers`` (warning): the steady-state bytes per step of a transfer kind
  differ across processes by more than half (and by at least ``min_bytes``): in SPMD every
  step waits in its collectives for the process with the most to move (straggler risk).

Processes that died are left out of the comparisons (their counts stop mid-run). A job of one
process has nothing to compare, so only ``process-died`` applies.
"""
from __future__ import annotations

from jaxplace_cli.analysis.rules.base import ERROR, WARNING, Finding
from jaxplace_cli.model.events import D2H, H2D
from jaxplace_cli.model.sizes import human_bytes

JOB_RULES = ("process-died", "process-idle", "single-process-io", "unequal-step-transfers")
IDLE_RATIO = 0.1
UNEQUAL_RATIO = 1.5
_WHAT = {H2D: "host->device", D2H: "device->host"}


def job_selected(select=None, ignore=None) -> list[str]:
    """The job rules ``--rule``/``--ignore`` leave (all when no ``--rule`` is given)."""
    return [r for r in JOB_RULES if (not select or r in select) and r not in (ignore or [])]


def job_findings(view, cfg, select=None, ignore=None) -> list[Finding]:
    rules = {"process-died": died, "process-idle": idle, "single-process-io": single_process_io,
             "unequal-step-transfers": unequal_step_transfers}
    return [f for name in job_selected(select, ignore) for f in rules[name](view, cfg)]


def died(view, cfg) -> list[Finding]:
    out = []
    stopped = [v for v in view.processes if not v.died and "launch" in v.ended]
    for v in view.processes:
        if not v.died:
            continue
        first = " first" if view.first_failure == v.index else ""
        msg = f"process {v.index} died{first}: {v.died}"
        if stopped and view.first_failure == v.index:
            msg += "; launch stopped the others (" + ", ".join(f"p{s.index}: {s.ended}" for s in stopped) + ")"
        msg += (". Its store holds what was recorded up to then" if v.result is not None
                else f". Its run cannot be read: {v.error}")
        out.append(Finding("process-died", ERROR, msg, devices=list(v.devices),
                           fix=f"read process {v.index}'s last output lines ([p{v.index}] under jaxplace launch) "
                               f"and its notes; audit it alone with: jaxplace audit {v.path}"))
    if view.missing:
        ids = ", ".join(map(str, view.missing[:20])) + (" ..." if len(view.missing) > 20 else "")
        out.append(Finding("process-died", ERROR,
                           f"{len(view.missing)} of the job's {view.process_count} processes recorded "
                           f"nothing (no proc-<i>/ for process {ids}): they never started jaxplace run, "
                           "or wrote elsewhere (--out must be the same directory in every process)",
                           count=len(view.missing)))
    return out


def _alive(view):
    return [v for v in view.processes if v.result is not None and not v.died]


def idle(view, cfg) -> list[Finding]:
    live = _alive(view)
    if len(live) < 2:
        return []
    busiest = max(live, key=lambda v: v.ops)
    if busiest.ops < cfg.imbalance_min_ops:
        return []
    out = []
    for v in live:
        if v.ops < IDLE_RATIO * busiest.ops:
            out.append(Finding(
                "process-idle", WARNING,
                f"process {v.index} dispatched {v.ops:,} ops while process {busiest.index} dispatched "
                f"{busiest.ops:,}: its devices ({', '.join(v.devices) or 'unknown'}) idle while the "
                "others work", count=v.ops, devices=list(v.devices),
                fix="give every process its share of the work: in SPMD every process calls the same "
                    "jitted step on a global mesh (jax.sharding.Mesh over jax.devices())"))
    return out


def single_process_io(view, cfg) -> list[Finding]:
    live = _alive(view)
    if len(live) < 2:
        return []
    out = []
    for kind in (H2D, D2H):
        doing = [v for v in live if v.totals.get(kind) and v.totals[kind].count]
        if len(doing) != 1 or doing[0].totals[kind].count < cfg.loop_threshold:
            continue
        v = doing[0]
        t = v.totals[kind]
        out.append(Finding(
            "single-process-io", WARNING,
            f"process {v.index} did all {t.count:,} {_WHAT[kind]} transfers of the job "
            f"({human_bytes(t.bytes)}); the other {len(live) - 1} processes did none: the job's "
            f"{'input' if kind == H2D else 'output'} goes through one host",
            count=t.count, bytes=t.bytes, devices=list(v.devices),
            fix="let every process load (or fetch) its own share: jax.make_array_from_process_local_data "
                "builds a global array from each process's local batch"))
    return out


def unequal_step_transfers(view, cfg) -> list[Finding]:
    live = [v for v in _alive(view) if v.steps]
    if len(live) < 2:
        return []
    out = []
    sole = {k for k in (H2D, D2H) if len([v for v in _alive(view) if v.totals.get(k) and v.totals[k].count]) == 1}
    for kind in (H2D, D2H):
        if kind in sole:
            continue  # single-process-io says it
        per = {v.index: v.step_medians.get(kind, {}).get("bytes", 0) for v in live}
        hi, lo = max(per.values()), min(per.values())
        if hi < cfg.min_bytes or hi - lo < cfg.min_bytes or hi <= UNEQUAL_RATIO * lo:
            continue
        listing = ", ".join(f"p{i} {human_bytes(int(b))}" for i, b in sorted(per.items()))
        out.append(Finding(
            "unequal-step-transfers", WARNING,
            f"{_WHAT[kind]} bytes per step differ across processes ({listing}; median of the "
            "steady-state steps): every step waits in its collectives for the process with the "
            "most to move (straggler risk)", bytes=int(hi - lo),
            fix="give every process the same amount of data per step (equal local batch sizes)"))
    return out
