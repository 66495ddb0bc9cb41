"""The budget check: a recorded run against a transfer budget (analysis/budget_file.py), one
breach per exceeded limit, each a sentence that names the worst step or site. ``[total]`` limits
of a job are analysis/budget_total.py. docs/budgets.md says what each limit counts.
"""
from __future__ import annotations

import bisect

from jaxplace_cli.analysis.budget_file import Breach, Budget, BudgetError, budget_from_dict, load_budget, merge_flags
from jaxplace_cli.analysis.budget_total import total_breaches
from jaxplace_cli.analysis.rules.loss import RULE as LOSS_RULE
from jaxplace_cli.analysis.rules.loss import loss_breaches
from jaxplace_cli.analysis.steps import step_number
from jaxplace_cli.model.budget_limits import MEMORY, limit_noun, limit_text
from jaxplace_cli.model.events import D2H
from jaxplace_cli.model.paths import file_name, site_name
from jaxplace_cli.model.severity import SEVERITIES
from jaxplace_cli.store import queries

# the check, and the budget file's model (budget_file.py) that callers import from here with it
__all__ = ["Breach", "Budget", "BudgetError", "budget_from_dict", "check", "judge_run", "load_budget", "merge_flags"]


def _where(sites, sid, api="") -> str:
    s = sites.get(sid)
    if s is None:
        return ""
    return site_name(s.file, s.line) + (f" {api}" if api else "")


class _Steps:
    """The audit's steps as a budget counts them: per-step limits judge steady state only."""

    def __init__(self, info):
        self.info = info  # StepInfo, or None
        self.steps = info.steps if info is not None else []
        self.warmup = info.warmup if info is not None else 0
        self._starts = [s.start_seq for s in self.steps]

    def steady(self, seq: int) -> int | None:
        """The index of the steady-state (after warm-up) step holding ``seq``, else None."""
        i = bisect.bisect_right(self._starts, seq) - 1
        return i if i >= 0 and seq < self.steps[i].end_seq and i >= self.warmup else None

    def missing(self, rule: str, limit: int, what: str) -> Breach:
        """The breach of a per-step limit on a run without detected steps (``what``: "d2h per
        step was", "host syncs per step were")."""
        detail = self.info.detail if self.info else "no run"
        return Breach(rule, limit, -1, f"{what} limited but no steps were detected "
                                       f"({detail}); mark steps with "
                                       "jax.profiler.StepTraceAnnotation or drop the per-step limit")


def check(result, run, budget: Budget, default_min_bytes: int) -> list[Breach]:
    """Breaches of ``budget`` by a recorded run (``result`` is its AuditResult), in the order
    of the budget's limits: transfer kinds, host syncs, ping-pong, recompiles, fail_on."""
    sites = run.store.sites()
    allowed = budget.allowed_sites(sites)
    min_bytes = budget.min_bytes if budget.min_bytes is not None else default_min_bytes
    rows = [t for t in queries.transfer_costs(run.store) if t.site not in allowed]
    steps = _Steps(result.steps)
    breaches: list[Breach] = loss_breaches(result)  # data lost: never a pass (rules/loss.py)
    for kind, limits in budget.kinds.items():
        if kind == MEMORY:
            breaches += _memory(result, limits, steps)
            continue
        # Small h2d are mostly Python scalar operands; a small d2h is still a host
        # sync (float(loss)), so d2h limits count every read unless the budget sets min_bytes.
        floor = min_bytes if kind != D2H or budget.min_bytes is not None else 0
        mine = [t for t in rows if t.kind == kind and t.bytes >= floor]
        breaches += _kind_totals(kind, limits, mine, sites)
        breaches += _kind_per_step(kind, limits, mine, steps, sites)
    if budget.host_syncs_per_step is not None:
        breaches += _host_syncs_per_step(rows, budget.host_syncs_per_step, steps, sites)
    # findings at an allowed site are expected, like its transfers
    findings = [f for f in result.findings
                if f.rule != LOSS_RULE and not (f.file and budget.allows(f.file, f.line))]
    if budget.pingpong is not None:
        breaches += _pingpong(findings, budget.pingpong)
    if budget.recompiles is not None:
        breaches += _recompiles(run, budget, result)
    if budget.total:  # a run of one process is a job of one: its total is its own
        breaches += total_breaches([(result, run)], budget, default_min_bytes)
    if budget.fail_on:
        breaches += _fail_on(findings, budget)
    return breaches


def _kind_totals(kind: str, limits: dict, mine: list, sites) -> list[Breach]:
    """``count`` and ``bytes`` of one transfer kind over the whole run."""
    totals = {"count": len(mine), "bytes": sum(t.bytes for t in mine)}
    top = _top_site(mine, sites)
    return [Breach(f"{kind}.{key}", limits[key], totals[key],
                   f"{kind} {limit_noun(key)} were limited to {limit_text(key, limits[key])} but the run "
                   f"{'did' if key == 'count' else 'moved'} {limit_text(key, totals[key])}{top[0]}", *top[1:])
            for key in ("count", "bytes") if key in limits and totals[key] > limits[key]]


def _kind_per_step(kind: str, limits: dict, mine: list, steps: _Steps, sites) -> list[Breach]:
    """``count_per_step`` and ``bytes_per_step`` of one transfer kind: the worst steady-state
    step (the first of equals) against the limit."""
    out = []
    for key in ("count_per_step", "bytes_per_step"):
        if key not in limits:
            continue
        if not steps.steps:
            out.append(steps.missing(f"{kind}.{key}", limits[key], f"{kind} per step was"))
            continue
        per: dict[int, list] = {}
        for t in mine:
            i = steps.steady(t.seq)
            if i is not None:
                per.setdefault(i, []).append(t)
        counting = key == "count_per_step"
        worst, worst_rows = None, []
        for i, ts in sorted(per.items()):
            value = len(ts) if counting else sum(t.bytes for t in ts)
            if worst is None or value > worst[1]:
                worst, worst_rows = (i, value), ts
        if worst and worst[1] > limits[key]:
            top = _top_site(worst_rows, sites)
            what = kind if counting else f"{kind} bytes"
            out.append(Breach(f"{kind}.{key}", limits[key], worst[1],
                              f"{what} per step was limited to {limit_text(key, limits[key])} "
                              f"but step {step_number(steps.info, worst[0])} did {limit_text(key, worst[1])}{top[0]}",
                              *top[1:]))
    return out


def _memory(result, limits: dict, steps: _Steps) -> list[Breach]:
    """``[memory]``: the peak of any one device, of all together, and the growth per steady
    step; each breach names the device, its figure and the line holding most at its peak."""
    from jaxplace_cli.analysis.memory import step_ends, total_peak

    report = result.memory
    out = []
    if report is None:
        why = ("recorded with --record transfers, which does not track the eager ops' arrays; record it with "
               "--record all" if getattr(result.manifest, "record", None) == "transfers"
               else "recorded before jaxplace tracked frees; record it again")
        return [Breach(f"{MEMORY}.{key}", limit, -1, f"device memory ({key}) limited but the run has no "
                                                     f"memory rows ({why})") for key, limit in limits.items()]
    if "peak" in limits and report.devices:
        d = max(report.devices, key=lambda d: (d.peak_bytes, [-x for x in _dev_order(d.device)]))
        if d.peak_bytes > limits["peak"]:
            out.append(_peak_breach("peak", limits["peak"], d.peak_bytes, f"{d.device} peaked at", d.at_peak,
                                    "per device"))
    if "peak_total" in limits:
        nbytes, _seq, holders = total_peak(report)
        if nbytes > limits["peak_total"]:
            out.append(_peak_breach("peak_total", limits["peak_total"], nbytes, "all devices together peaked at",
                                    holders, "over all devices"))
    if "growth_per_step" in limits:
        limit = limits["growth_per_step"]
        if not steps.steps:
            out.append(steps.missing(f"{MEMORY}.growth_per_step", limit, "device memory growth per step was"))
        else:
            grown = step_ends(report, steps.info)
            worst = max(grown.items(), key=lambda kv: kv[1][0], default=None)
            if worst is not None and worst[1][0] > limit:
                dev, (per, ends) = worst
                dm = next(d for d in report.devices if d.device == dev)
                top = dm.at_peak[0] if dm.at_peak else None
                where = f" (most held at its peak: {site_name(top.file, top.line)})" if top else ""
                out.append(Breach(f"{MEMORY}.growth_per_step", limit, int(per),
                                  f"device memory growth per step was limited to {limit_text('peak', limit)} but "
                                  f"{dev} grew {limit_text('peak', int(per))} per step over {len(ends)} steady "
                                  f"steps{where}", top.file if top else "", top.line if top else 0))
    return out


def _dev_order(label: str) -> tuple:
    platform, _, num = label.rpartition(":")
    return (int(num),) if num.isdigit() else (0,)


def _peak_breach(key: str, limit: int, actual: int, what: str, holders, scope: str) -> Breach:
    top = holders[0] if holders else None
    where = f"; most held by {site_name(top.file, top.line)} ({limit_text(key, top.bytes)})" if top else ""
    return Breach(f"{MEMORY}.{key}", limit, actual,
                  f"device memory was limited to {limit_text(key, limit)} {scope} but {what} "
                  f"{limit_text(key, actual)}{where}", top.file if top else "", top.line if top else 0)


def _pingpong(findings, limit: int) -> list[Breach]:
    """Round trips of every ping-pong finding together."""
    hits = [f for f in findings if f.rule == "pingpong"]
    actual = sum(f.count for f in hits)
    if actual <= limit:
        return []
    f = max(hits, key=lambda f: f.count)
    return [Breach("pingpong", limit, actual,
                   f"ping-pong returns were limited to {limit} but the run had "
                   f"{actual} ({_short(f.file)}:{f.line})", f.file, f.line)]


def _fail_on(findings, budget: Budget) -> list[Breach]:
    """One breach per finding at ``fail_on`` severity or worse."""
    worst = SEVERITIES.index(budget.fail_on)
    # a rule with its own limit is judged by that limit, not failed a second time here
    limited = {r for r, key in (("pingpong", "pingpong"), ("recompile", "recompiles"))
               if getattr(budget, key) is not None}
    out = []
    for f in findings:
        if f.rule not in limited and SEVERITIES.index(f.severity) <= worst:
            where = f" at {_short(f.file)}:{f.line}" if f.file else ""
            out.append(Breach(f"fail_on.{f.rule}", 0, 1, f"{f.severity} finding {f.rule}{where}: {f.message}",
                              f.file, f.line))
    return out


_short = file_name


def _host_syncs_per_step(rows, limit: int, steps: _Steps, sites) -> list[Breach]:
    """Blocking device->host reads (any size: a 4-byte float(loss) stalls the host as long as
    a big read) in the worst steady-state step, counted in calls like host-sync-in-loop: a
    jax.device_get of a pytree reads every leaf but waits once."""
    if not steps.steps:
        return [steps.missing("host_syncs_per_step", limit, "host syncs per step were")]
    per: dict = {}
    for t in rows:
        if t.kind != D2H or not t.blocking:
            continue
        i = steps.steady(t.seq)
        if i is not None:
            per.setdefault(i, {}).setdefault(t.op_seq or -t.seq, t)  # one wait per call
    if not per:
        return []
    i, calls = max(per.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    if len(calls) <= limit:
        return []
    top = _top_site(list(calls.values()), sites)
    return [Breach("host_syncs_per_step", limit, len(calls),
                   f"host syncs per step were limited to {limit} but step {step_number(steps.info, i)} did "
                   f"{len(calls)}{top[0]}",
                   *top[1:])]


def _recompiles(run, budget: Budget, result) -> list[Breach]:
    """Compiles beyond the first of each jitted function (per the recompile rule's keying),
    whatever the audit's --recompile-threshold: ``recompiles = 0`` means every function
    compiled once."""
    from jaxplace_cli.analysis.findings import RuleConfig, recompile

    hits = [f for f in recompile(run, RuleConfig(recompile_threshold=1))
            if not (f.file and budget.allows(f.file, f.line))]
    actual = sum(f.count - 1 for f in hits)
    if actual <= budget.recompiles:
        return []
    f = max(hits, key=lambda f: f.count)
    name = f.message.split(" was compiled", 1)[0]
    return [Breach("recompiles", budget.recompiles, actual,
                   f"recompiles were limited to {budget.recompiles} but the run had {actual} "
                   f"({name} compiled {f.count} times at {_short(f.file)}:{f.line})", f.file, f.line)]


def _top_site(rows, sites):
    """(' (file:line api)', file, line) of the site contributing most bytes/rows
    (``rows``: ``TransferCost``)."""
    if not rows:
        return ("", "", 0)
    weight: dict = {}
    for t in rows:
        k = (t.site, t.api)
        weight[k] = weight.get(k, 0) + max(t.bytes, 1)
    (sid, api), _ = max(weight.items(), key=lambda kv: kv[1])
    s = sites.get(sid)
    return (f" ({_where(sites, sid, api)})" if s else "", s.file if s else "", s.line if s else 0)


def judge_run(run, budget: Budget, min_bytes: int = 1024, rules=None):
    """Audit ``run`` and check it against ``budget``: the AuditResult with ``budget`` set.
    What ``jaxplace run --budget``, ``jaxplace_cli.budget()`` and the pytest marker share."""
    from jaxplace_cli.analysis import BudgetVerdict, audit_run
    from jaxplace_cli.analysis.findings import RuleConfig

    result = audit_run(run, rules or RuleConfig(min_bytes=min_bytes))
    result.budget = BudgetVerdict(budget.source, budget.limit_names(), check(result, run, budget, min_bytes))
    return result
