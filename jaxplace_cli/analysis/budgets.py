"""Transfer budgets: a strict TOML format, the same limits as flags, and the check.

A budget turns an audit into a CI verdict. Parsing is strict on purpose: a typo in a budget
file would otherwise silently disable a limit, so an unknown key is an error (exit 2) that
names the key and the file, before anything runs. docs/budgets.md documents the format.
"""
from __future__ import annotations

import bisect
import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.events import D2H, TRANSFER_KINDS
from jaxplace_cli.model.paths import file_name, site_name
from jaxplace_cli.model.sizes import MAX_SIZE, human_bytes, parse_size
from jaxplace_cli.model.untrusted import load_toml
from jaxplace_cli.store import queries

KIND_KEYS = ("count", "bytes", "count_per_step", "bytes_per_step")
SIZE_KEYS = ("bytes", "bytes_per_step")
TOP_KEYS = ("version", "min_bytes", "fail_on", "allow", "pingpong", "host_syncs_per_step",
            "recompiles", *TRANSFER_KINDS, "total")
SEVERITY_ORDER = ("error", "warning", "info")


class BudgetError(JaxplaceError):
    """A budget that cannot be used: one line naming the file and the key."""


@dataclass
class Budget:
    source: str = "flags"
    min_bytes: int | None = None  # None: the audit's --min-bytes
    fail_on: str | None = None  # a finding of this severity or worse fails the budget
    allow: list[str] = field(default_factory=list)  # "file:line" globs not counted
    kinds: dict[str, dict[str, int]] = field(default_factory=dict)  # "h2d" -> {"count": 3}
    pingpong: int | None = None
    host_syncs_per_step: int | None = None
    recompiles: int | None = None
    total: dict[str, dict[str, int]] = field(default_factory=dict)  # [total.h2d]: a whole job's

    def limit_names(self) -> list[str]:
        """Every limit this budget checks (one JUnit testcase each)."""
        names = [f"{k}.{key}" for k, limits in self.kinds.items() for key in limits]
        names += [k for k in ("pingpong", "host_syncs_per_step", "recompiles") if getattr(self, k) is not None]
        if self.fail_on:
            names.append(f"fail_on.{self.fail_on}")
        names += [f"total.{k}.{key}" for k, limits in self.total.items() for key in limits]
        return names

    def is_empty(self) -> bool:
        return not (self.fail_on or self.kinds or self.total or self.pingpong is not None
                    or self.host_syncs_per_step is not None or self.recompiles is not None)


@dataclass
class Breach:
    rule: str  # e.g. "d2h.count_per_step"
    limit: int
    actual: int
    message: str
    file: str = ""
    line: int = 0


def _int(value, key: str, where: str, size: bool = False) -> int:
    try:
        if size:
            return parse_size(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{_show(value)} is not a non-negative integer")
        if value > MAX_SIZE:
            raise ValueError(f"a {value.bit_length()}-bit number is larger than any count (at most {MAX_SIZE:,})")
        return value
    except ValueError as exc:
        raise BudgetError(f"{where}: {key}: {exc}") from None


def _show(value) -> str:
    text = repr(value) if not isinstance(value, int) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def load_budget(path: str | Path) -> Budget:
    """A budget file, read bounded (a regular file of at most 1 MiB: model/untrusted.py)."""
    path = Path(path)
    return budget_from_dict(load_toml(path, "budget file", BudgetError), str(path))


def budget_from_dict(data: dict, where: str) -> Budget:
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise BudgetError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(TOP_KEYS)})")
    if data.get("version", 1) != 1:
        raise BudgetError(f"{where}: version {data['version']!r} is not supported (this jaxplace reads 1)")
    b = Budget(source=where)
    if "min_bytes" in data:
        b.min_bytes = _int(data["min_bytes"], "min_bytes", where, size=True)
    if "fail_on" in data:
        if data["fail_on"] not in SEVERITY_ORDER:
            raise BudgetError(f"{where}: fail_on must be one of {', '.join(SEVERITY_ORDER)}, not {data['fail_on']!r}")
        b.fail_on = data["fail_on"]
    if "allow" in data:
        allow = data["allow"]
        if not isinstance(allow, list) or not all(isinstance(a, str) and a.strip() for a in allow):
            raise BudgetError(f"{where}: allow must be a list of \"file:line\" or \"file\" patterns (globs allowed)")
        b.allow = allow
    for key in ("pingpong", "host_syncs_per_step", "recompiles"):
        if key in data:
            setattr(b, key, _int(data[key], key, where))
    for kind in TRANSFER_KINDS:
        if kind not in data:
            continue
        table = data[kind]
        if not isinstance(table, dict):
            raise BudgetError(f"{where}: [{kind}] must be a table with {', '.join(KIND_KEYS)}")
        bad = sorted(set(table) - set(KIND_KEYS))
        if bad:
            raise BudgetError(f"{where}: unknown key {kind}.{bad[0]!r} (known: {', '.join(KIND_KEYS)})")
        b.kinds[kind] = {k: _int(v, f"{kind}.{k}", where, size=k in SIZE_KEYS) for k, v in table.items()}
    if "total" in data:  # the same kind tables, for all processes of a job together
        table = data["total"]
        if not isinstance(table, dict) or set(table) - set(TRANSFER_KINDS):
            raise BudgetError(f"{where}: [total] holds only [total.h2d], [total.d2h] and [total.d2d] tables")
        b.total = budget_from_dict(table, f"{where} [total]").kinds
    return b


def merge_flags(budget: Budget | None, flags: dict) -> Budget:
    """Flag values (``--max-d2h-per-step 0``) override the file's. Keys are budget keys such
    as ``d2h.count_per_step``, ``pingpong``, ``fail_on``; None = not given."""
    b = budget or Budget()
    given = False
    for key, value in flags.items():
        if value is None:
            continue
        if "." in key:
            kind, limit = key.split(".", 1)
            b.kinds.setdefault(kind, {})[limit] = _int(value, f"--{key}", "flags", size=limit in SIZE_KEYS)
        elif key == "fail_on":
            if value not in SEVERITY_ORDER:
                raise BudgetError(f"--fail-on must be one of {', '.join(SEVERITY_ORDER)}, not {value!r}")
            b.fail_on = value
        else:
            setattr(b, key, _int(value, f"--{key.replace('_', '-')}", "flags"))
        given = True
    if given and b.source != "flags":
        b.source += " + flags"
    return b


# -- the check ---------------------------------------------------------------------------------

def _is_allowed(file: str, line: int, patterns: list[str]) -> bool:
    """``file:line`` matches a pattern (``train.py:41``, ``*/loader.py:*``; a pattern without
    ``:LINE`` covers the whole file) against the full path or any trailing part of it."""
    text = f"{file}:{line}"
    for p in patterns:
        if ":" not in p:
            p += ":*"
        if fnmatch.fnmatchcase(text, p) or fnmatch.fnmatchcase(text, "*/" + p.lstrip("/")):
            return True
    return False


def _allowed_sites(sites: dict, patterns: list[str]) -> set[int]:
    return {sid for sid, s in sites.items() if _is_allowed(s.file, s.line, patterns)}


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
    allowed = _allowed_sites(sites, budget.allow) if budget.allow else set()
    min_bytes = budget.min_bytes if budget.min_bytes is not None else default_min_bytes
    rows = [t for t in queries.transfer_costs(run.store) if t.site not in allowed]
    steps = _Steps(result.steps)
    breaches: list[Breach] = []
    for kind, limits in budget.kinds.items():
        # Small h2d are Python scalar operands (DESIGN fact 7); a small d2h is still a host
        # sync (float(loss)), so d2h limits count every read unless the budget sets min_bytes.
        floor = min_bytes if kind != D2H or budget.min_bytes is not None else 0
        mine = [t for t in rows if t.kind == kind and t.bytes >= floor]
        breaches += _kind_totals(kind, limits, mine, sites)
        breaches += _kind_per_step(kind, limits, mine, steps, sites)
    if budget.host_syncs_per_step is not None:
        breaches += _host_syncs_per_step(rows, budget.host_syncs_per_step, steps, sites)
    # findings at an allowed site are expected, like its transfers
    findings = [f for f in result.findings if not (budget.allow and f.file
                                                   and _is_allowed(f.file, f.line, budget.allow))]
    if budget.pingpong is not None:
        breaches += _pingpong(findings, budget.pingpong)
    if budget.recompiles is not None:
        breaches += _recompiles(run, budget, result)
    if budget.total:  # a run of one process is a job of one: its total is its own
        from jaxplace_cli.analysis.budget_total import total_breaches

        breaches += total_breaches([(result, run)], budget, default_min_bytes)
    if budget.fail_on:
        breaches += _fail_on(findings, budget)
    return breaches


def _kind_totals(kind: str, limits: dict, mine: list, sites) -> list[Breach]:
    """``count`` and ``bytes`` of one transfer kind over the whole run."""
    totals = {"count": len(mine), "bytes": sum(t.bytes for t in mine)}
    top = _top_site(mine, sites)
    return [Breach(f"{kind}.{key}", limits[key], totals[key],
                   f"{kind} {_noun(key)} were limited to {_fmt(key, limits[key])} but the run "
                   f"{'did' if key == 'count' else 'moved'} {_fmt(key, totals[key])}{top[0]}", *top[1:])
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
                              f"{what} per step was limited to {_fmt(key, limits[key])} "
                              f"but step {worst[0]} did {_fmt(key, worst[1])}{top[0]}", *top[1:]))
    return out


def _pingpong(findings, limit: int) -> list[Breach]:
    """Round trips of every ping-pong finding together."""
    hits = [f for f in findings if f.rule == "pingpong"]
    actual = sum(f.count for f in hits)
    if actual <= limit:
        return []
    f = max(hits, key=lambda f: f.count)
    return [Breach("pingpong", limit, actual,
                   f"ping-pong round trips were limited to {limit} but the run had "
                   f"{actual} ({_short(f.file)}:{f.line})", f.file, f.line)]


def _fail_on(findings, budget: Budget) -> list[Breach]:
    """One breach per finding at ``fail_on`` severity or worse."""
    worst = SEVERITY_ORDER.index(budget.fail_on)
    # a rule with its own limit is judged by that limit, not failed a second time here
    limited = {r for r, key in (("pingpong", "pingpong"), ("recompile", "recompiles"))
               if getattr(budget, key) is not None}
    out = []
    for f in findings:
        if f.rule not in limited and SEVERITY_ORDER.index(f.severity) <= worst:
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
                   f"host syncs per step were limited to {limit} but step {i} did {len(calls)}{top[0]}",
                   *top[1:])]


def _recompiles(run, budget: Budget, result) -> list[Breach]:
    """Compiles beyond the first of each jitted function (per the recompile rule's keying),
    whatever the audit's --recompile-threshold: ``recompiles = 0`` means every function
    compiled once."""
    from jaxplace_cli.analysis.findings import RuleConfig, recompile

    hits = [f for f in recompile(run, RuleConfig(recompile_threshold=1))
            if not (budget.allow and f.file and _is_allowed(f.file, f.line, budget.allow))]
    actual = sum(f.count - 1 for f in hits)
    if actual <= budget.recompiles:
        return []
    f = max(hits, key=lambda f: f.count)
    name = f.message.split(" was compiled", 1)[0]
    return [Breach("recompiles", budget.recompiles, actual,
                   f"recompiles were limited to {budget.recompiles} but the run had {actual} "
                   f"({name} compiled {f.count} times at {_short(f.file)}:{f.line})", f.file, f.line)]


def _noun(key):
    return "transfers" if key == "count" else "bytes"


def _fmt(key, value):
    return human_bytes(value) if "bytes" in key else str(value)


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
