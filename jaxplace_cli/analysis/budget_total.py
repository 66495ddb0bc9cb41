"""``[total]`` budget limits: one kind's count, bytes and per-step numbers summed over the
processes of a ``jax.distributed`` job (docs/budgets.md). The check of one run
(analysis/budgets.py) uses it too: a run is a job of one process."""
from __future__ import annotations

import bisect

from jaxplace_cli.analysis.budget_file import Breach, Budget
from jaxplace_cli.model.budget_limits import limit_noun, limit_text
from jaxplace_cli.model.events import D2H


def total_breaches(parts, budget: Budget, default_min_bytes: int) -> list[Breach]:
    """``[total]`` limits over the processes of a job: ``parts`` is ``(AuditResult, run)`` per
    process. Counted as ``check`` counts a kind (same floor, allowed sites left out); per step,
    step i of every process is added up (SPMD processes run the same steps)."""
    min_bytes = budget.min_bytes if budget.min_bytes is not None else default_min_bytes
    breaches = []
    for kind, limits in budget.total.items():
        floor = min_bytes if kind != D2H or budget.min_bytes is not None else 0
        total = {"count": 0, "bytes": 0}
        steps: dict[int, list[int]] = {}
        for result, run in parts:
            allowed = budget.allowed_sites(run.store.sites()) if budget.allow else set()
            info = result.steps
            starts = [s.start_seq for s in info.steps] if info is not None else []
            for t in run.store.transfers():
                if t.kind != kind or t.bytes < floor or t.site in allowed:
                    continue
                total["count"] += 1
                total["bytes"] += t.bytes
                i = bisect.bisect_right(starts, t.seq) - 1
                if starts and i >= info.warmup and t.seq < info.steps[i].end_seq:
                    c = steps.setdefault(i, [0, 0])
                    c[0], c[1] = c[0] + 1, c[1] + t.bytes
        for key in ("count", "bytes"):
            if key in limits and total[key] > limits[key]:
                breaches.append(Breach(f"total.{kind}.{key}", limits[key], total[key],
                                       f"{kind} {limit_noun(key)} of the job were limited to {limit_text(key, limits[key])} "
                                       f"but its {len(parts)} processes {'did' if key == 'count' else 'moved'} "
                                       f"{limit_text(key, total[key])}"))
        for key, field_ in (("count_per_step", 0), ("bytes_per_step", 1)):
            if key in limits and steps:
                i, worst = max(steps.items(), key=lambda kv: (kv[1][field_], -kv[0]))
                if worst[field_] > limits[key]:
                    breaches.append(Breach(f"total.{kind}.{key}", limits[key], worst[field_],
                                           f"{kind if field_ == 0 else kind + ' bytes'} per step of the job were "
                                           f"limited to {limit_text(key, limits[key])} but step {i + 1} did "
                                           f"{limit_text(key, worst[field_])} over {len(parts)} processes"))
    return breaches
