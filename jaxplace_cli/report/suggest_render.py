"""Plain-text and JSON renderings of a plan, a verification and a graph solution.

Plain text (not rich tables) on purpose: the output is diffed by users and tests, and
piping it must not change it. Device names, sites, argv and paths come from the run: every line
passes ``safe.plain`` (``_lines``), so none can carry a control character to the terminal.
"""
from __future__ import annotations

import json
import shlex
from typing import NamedTuple

from jaxplace_cli.model.events import D2D, TRANSFER_KINDS
from jaxplace_cli.model.safe import plain
from jaxplace_cli.model.sizes import human_bytes, human_ns
from jaxplace_cli.suggest.model import MAKESPAN, THROUGHPUT, TOTAL, TRANSFERS, Graph, Solution
from jaxplace_cli.suggest.plan import Plan


def cost_text(objective: str, value) -> str:
    if value is None:
        return "unknown"
    if objective == TRANSFERS:
        return human_bytes(int(value))
    return human_ns(int(value))


def quality(sol: Solution, objective: str, cost=cost_text) -> str:
    """How good the answer provably is, naming the model a claim holds in."""
    model = f" in the model: {sol.model}" if sol.model else ""
    if sol.optimal:
        return "optimal" + model
    if sol.lower_bound is not None:
        gap = sol.gap
        return f"lower bound {cost(objective, sol.lower_bound)} (gap {gap:.1%}){model}"
    return "heuristic (no lower bound known)"


def _nb(cell) -> str:
    return f"{cell[0]} ({human_bytes(cell[1])})"


def render_plan(plan: Plan, policy_path: str | None, run_path: str) -> str:
    rg, sol, g = plan.rg, plan.solution, plan.rg.graph
    pinned = int((g.allowed.sum(axis=1) == 1).sum()) if g.n else 0
    out = [f"jaxplace suggest: {run_path} · objective {plan.objective} · devices {', '.join(g.devices)}",
           f"graph: {g.n} nodes ({pinned} pinned), {g.m} value uses"
           + (f"; {'; '.join(rg.notes)}" if rg.notes else ""),
           f"solver: {sol.solver} — {quality(sol, plan.objective)}; cost {cost_text(plan.objective, sol.cost)}; "
           f"{sol.seconds * 1e3:.1f} ms" + (f" ({'; '.join(sol.notes)})" if sol.notes else ""),
           f"placement: {len(plan.moved)} of {g.n} nodes move from where they ran", ""]
    rows = [("", "recorded", "model of recorded", "suggested")]
    for k in TRANSFER_KINDS:
        rows.append((k, _nb(plan.measured.totals[k]), _nb(plan.baseline.totals[k]), _nb(plan.predicted.totals[k])))
    rows.append(("ping-pong returns", "", str(plan.baseline.round_trips), str(plan.predicted.round_trips)))
    rows.append(("op time", human_ns(plan.measured.compute_ns), human_ns(plan.baseline.compute_ns),
                 human_ns(plan.predicted.compute_ns)))
    rows.append(("transfer time (est.)", "", human_ns(plan.baseline.transfer_ns), human_ns(plan.predicted.transfer_ns)))
    out += _table(rows)
    out += memory_lines(plan)
    if plan.baseline.totals != plan.measured.totals:
        out.append("note: the model of the recorded placement differs from what was measured; "
                   "predictions may be off by the same amount")
    sites = sorted(plan.predicted.sites.items(), key=lambda kv: (-kv[1][1], kv[0]))
    moved = [(k, s, v) for (k, s), v in sites if k == D2D]
    out += ["", "predicted d2d transfers by site:" if moved else "predicted d2d transfers: none"]
    if moved:
        out += _table([("site", "count", "bytes", "moved by")] +
                      [(s, str(v[0]), human_bytes(v[1]), ", ".join(sorted(plan.predicted.apis[(k, s)])))
                       for k, s, v in moved[:20]], indent="  ")
    out.append("")
    n_rules = len(plan.rules)
    if policy_path:
        out.append(f"policy: {policy_path} ({n_rules} rule{'s' if n_rules != 1 else ''} + [default] {plan.default})")
        out.append("verify: " + plan.verify_line(policy_path))
        out.append("        jaxplace audit <the new run directory>")
        script = plan.script[0] if plan.script else "SCRIPT"
        out.append(f"   or:  jaxplace suggest {shlex.quote(run_path)} -o {shlex.quote(policy_path)} --verify {shlex.quote(script)}")
    else:
        out.append(f"policy: not written ({n_rules} rule{'s' if n_rules != 1 else ''} + [default] {plan.default}); "
                   "pass -o policy.toml to write it")
    if plan.rg.retarget_puts and len(plan.moved):
        out.append("note: --retarget-puts: device_put targets were changed; a policy cannot change an explicit "
                   "device_put, so apply those moves in the script:")
        out += [f"  {site}: device_put to {new} instead of {old} ({n} call{'s' if n > 1 else ''})"
                for (site, old, new), n in retargeted_puts(plan)]
    return _lines(out)


def _limit_text(limit: int) -> str:
    from jaxplace_cli.suggest.memory_limit import UNLIMITED

    return "none" if limit >= UNLIMITED else human_bytes(limit)


def memory_lines(plan: Plan) -> list[str]:
    """Predicted peak device memory per device (and the limit, with --memory-limit)."""
    m = plan.memory
    if m is None:
        return []
    head = ("device", "peak, model of recorded", "peak, suggested") + (("limit",) if m.limit is not None else ())
    rows = [head]
    for i, dev in enumerate(m.devices):
        rows.append((dev, human_bytes(m.recorded[i]), human_bytes(m.predicted[i]))
                    + ((_limit_text(m.limit[i]),) if m.limit is not None else ()))
    out = ["", "device memory (predicted peak of live jax.Arrays per device):"] + _table(rows, indent="  ")
    if m.limit is not None:
        out.append(f"  every device fits its limit{f' ({m.moves} site/op group(s) moved for it)' if m.moves else ''}")
    return out


def memory_json(m) -> dict | None:
    from jaxplace_cli.suggest.memory_limit import UNLIMITED

    if m is None:
        return None
    return {"devices": [{"device": d, "recorded_peak_bytes": m.recorded[i], "predicted_peak_bytes": m.predicted[i],
                         "predicted_peak_seq": m.predicted_seq[i],
                         "limit_bytes": (None if m.limit is None or m.limit[i] >= UNLIMITED else m.limit[i])}
                        for i, d in enumerate(m.devices)],
            "limited": m.limit is not None, "groups_moved": m.moves}


def retargeted_puts(plan: Plan) -> list:
    """[((file:line, recorded device, suggested device), calls)] for the device_puts the
    suggestion moves, in line order: the edits the user makes in the script."""
    from collections import Counter

    devices = plan.rg.graph.devices
    a, rec = plan.solution.assign, plan.rg.recorded
    changes = Counter()
    for v in plan.moved.tolist():
        nd = plan.rg.nodes[v]
        if nd.kind == "device_put":
            changes[(f"{nd.file}:{nd.line}", devices[int(rec[v])], devices[int(a[v])])] += 1
    return sorted(changes.items(), key=lambda kv: (kv[0][0].rsplit(":", 1)[0], int(kv[0][0].rsplit(":", 1)[1]), kv[0][1:]))


def render_verification(v, plan: Plan) -> str:
    rest = v.command[v.command.index("jaxplace_cli") + 1:] if "jaxplace_cli" in v.command else v.command[1:]
    out = ["", f"verification: {shlex.join(['jaxplace', *rest])}"]
    if not v.ok:
        out.append(f"  could not verify: {v.error}")
        return _lines(out)
    rows = [("kind", "site", "predicted", "measured", "")]
    for kind, site, p, m in v.rows:
        rows.append((kind, "(all)" if site == "*" else site, _nb(p), _nb(m), "ok" if p == m else "DIFFERENT"))
    out += _table(rows, indent="  ")
    pred_t, got_t = plan.predicted.compute_ns, v.measured.compute_ns
    dev = (got_t - pred_t) / pred_t if pred_t else 0.0
    out.append(f"  op time: predicted {human_ns(pred_t)}, measured {human_ns(got_t)} ({dev:+.0%})")
    if v.memory_rows:
        out.append("  device memory (peak):")
        out += _table([("device", "predicted", "measured", "limit", "")] +
                      [(d, human_bytes(p), human_bytes(m), _limit_text(lim) if lim is not None else "none", verdict)
                       for d, p, m, lim, verdict in v.memory_rows], indent="    ")
    if v.error:
        out.append(f"  {v.error}")
    transfers_ok = v.match or (v.transfers_match and not v.error)
    out.append("  result: transfers match the prediction exactly" if transfers_ok
               else "  result: measured transfers DIFFER from the prediction")
    verdicts = {r[4] for r in v.memory_rows}
    if verdicts:
        out.append("  result: device memory matches the prediction (peaks within 1 %)" if verdicts == {"ok"} else
                   "  result: measured device memory EXCEEDS the limit" if "OVER LIMIT" in verdicts else
                   "  result: measured device memory DIFFERS from the prediction (peaks more than 1 % apart)")
    out.append(f"  new run: {v.run_dir}")
    return _lines(out)


def render_graph(path: str, g: Graph, sol: Solution, objective: str) -> str:
    a = sol.assign
    out = [f"jaxplace suggest --graph {path} · objective {objective}",
           f"graph: {g.n} nodes, {g.m} edges, devices {', '.join(g.devices)}",
           f"solver: {sol.solver} — {quality(sol, objective, _graph_cost)}; cost {_graph_cost(objective, sol.cost)}; "
           f"{sol.seconds * 1e3:.1f} ms" + (f" ({'; '.join(sol.notes)})" if sol.notes else ""), ""]
    loads = None
    if objective == THROUGHPUT:
        from jaxplace_cli.suggest.ideals import stage_loads

        loads = stage_loads(g, a)
    rows = [("device", "nodes", "compute", "memory") + (("load",) if loads is not None else ())]
    for d, name in enumerate(g.devices):
        on = a == d
        rows.append((name, str(int(on.sum())), _graph_cost(TOTAL, int(g.unary[on, d].sum())),
                     human_bytes(int(g.mem[on].sum())))
                    + ((_graph_cost(TOTAL, int(loads[d])),) if loads is not None else ()))
    out += _table(rows)
    return _lines(out)


def _lines(out: list[str]) -> str:
    """The lines of a rendering, each one line of safe text."""
    return "".join(plain(line) + "\n" for line in out)


def _graph_cost(objective: str, value) -> str:
    from jaxplace_cli.suggest.from_json import TIME_SCALE

    if value is None:
        return "unknown"
    if objective == TRANSFERS:
        return human_bytes(int(value))
    return f"{value / TIME_SCALE:.6g} ms"


def plan_json(plan: Plan, policy_path: str | None, verification=None) -> dict:
    sol = plan.solution

    def traffic(t):
        return {"totals": {k: {"count": v[0], "bytes": v[1]} for k, v in t.totals.items()},
                "sites": [{"kind": k, "site": s, "count": v[0], "bytes": v[1]}
                          for (k, s), v in sorted(t.sites.items())],
                "round_trips": t.round_trips, "compute_ns": t.compute_ns, "transfer_ns": t.transfer_ns}

    out = {"objective": plan.objective, "devices": list(plan.rg.graph.devices),
           "nodes": plan.rg.graph.n, "moved": int(len(plan.moved)),
           "solver": {"name": sol.solver, "optimal": bool(sol.optimal), "model": sol.model, "cost": sol.cost,
                      "lower_bound": sol.lower_bound, "gap": sol.gap, "seconds": sol.seconds,
                      "notes": sol.notes},
           "recorded": traffic(plan.measured), "model_of_recorded": traffic(plan.baseline),
           "predicted": traffic(plan.predicted),
           "expected": traffic(plan.expected) if plan.expected is not None else None,
           "memory": memory_json(plan.memory),
           "policy": {"path": policy_path, "default": plan.default, "rules": plan.rules},
           "verify_command": plan.run_command(policy_path or "policy.toml")}
    if verification is not None:
        out["verification"] = {"ok": verification.ok, "match": verification.match,
                               "run_dir": verification.run_dir, "error": verification.error,
                               "script_stdout": verification.stdout,
                               "measured": traffic(verification.measured) if verification.measured else None,
                               "memory": [{"device": d, "predicted_peak_bytes": p, "measured_peak_bytes": m,
                                           "limit_bytes": lim, "verdict": verdict}
                                          for d, p, m, lim, verdict in verification.memory_rows]}
    return out


def graph_json(g: Graph, sol: Solution, objective: str) -> dict:
    from jaxplace_cli.suggest.from_json import placement_json

    out = placement_json(g, sol.assign, sol.cost if objective == THROUGHPUT else None)
    out.update({"objective": objective, "solver": sol.solver, "optimal": bool(sol.optimal),
                "cost": sol.cost, "lower_bound": sol.lower_bound, "seconds": sol.seconds,
                "model": sol.model, "notes": sol.notes, "unit": "1e-6 of the file's time unit"})
    if objective == MAKESPAN:
        out["makespan"] = sol.cost
    return out


def _table(rows, indent: str = "") -> list[str]:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]


class PlanReport(NamedTuple):
    """What ``jaxplace suggest RUN`` shows: the plan, where its policy went, the verification."""

    plan: Plan
    policy_path: str | None
    run_path: str
    verification: object = None  # suggest.verify's result, with --verify


class GraphReport(NamedTuple):
    """What ``jaxplace suggest --graph FILE`` shows."""

    path: str
    graph: Graph
    solution: Solution
    objective: str


def plan_text(r: PlanReport, options) -> str:
    text = render_plan(r.plan, r.policy_path, r.run_path)
    return text + (render_verification(r.verification, r.plan) if r.verification is not None else "")


def plan_doc(r: PlanReport, options) -> str:
    return json.dumps(plan_json(r.plan, r.policy_path, r.verification), indent=2, default=jsonable) + "\n"


def plan_markdown(r: PlanReport, options) -> str:
    """The plan for a merge-request comment or $GITHUB_STEP_SUMMARY: what the text says, as
    Markdown tables; every run-derived string through model/safe.py."""
    from jaxplace_cli.model.safe import code_span, markdown

    plan, sol, g = r.plan, r.plan.solution, r.plan.rg.graph
    out = [f"## jaxplace suggest: {code_span(r.run_path)}", "",
           f"**objective {markdown(plan.objective)}** · devices {markdown(', '.join(g.devices))} · "
           f"solver {markdown(sol.solver)} ({markdown(quality(sol, plan.objective))}) · "
           f"{len(plan.moved)} of {g.n} nodes move", "",
           "| | recorded | model of recorded | suggested |", "|---|---:|---:|---:|"]
    out += [f"| {k} | {_nb(plan.measured.totals[k])} | {_nb(plan.baseline.totals[k])} | {_nb(plan.predicted.totals[k])} |"
            for k in TRANSFER_KINDS]
    m = plan.memory
    if m is not None:
        out += ["", "### Device memory (predicted peak)", "",
                "| device | model of recorded | suggested | limit |", "|---|---:|---:|---:|"]
        out += [f"| {markdown(d)} | {human_bytes(m.recorded[i])} | {human_bytes(m.predicted[i])} | "
                f"{_limit_text(m.limit[i]) if m.limit is not None else 'none'} |" for i, d in enumerate(m.devices)]
    n = len(plan.rules)
    out += ["", f"**Policy:** {code_span(r.policy_path) if r.policy_path else 'not written'} "
                f"({n} rule{'s' if n != 1 else ''} + `[default]` {markdown(plan.default)})"]
    if r.policy_path:
        out.append(f"verify: {code_span(plan.verify_line(r.policy_path))}")
    v = r.verification
    if v is not None:
        out += ["", "### Verification", ""]
        if not v.ok:
            out.append(f"could not verify: {markdown(v.error)}")
            return "\n".join(out) + "\n"
        out += ["| kind | site | predicted | measured | |", "|---|---|---:|---:|---|"]
        out += [f"| {k} | {markdown('(all)' if site == '*' else site)} | {_nb(p)} | {_nb(q)} | "
                f"{'ok' if p == q else '**DIFFERENT**'} |" for k, site, p, q in v.rows]
        if v.memory_rows:
            out += ["", "| device | predicted peak | measured peak | limit | |", "|---|---:|---:|---:|---|"]
            out += [f"| {markdown(d)} | {human_bytes(p)} | {human_bytes(q)} | "
                    f"{human_bytes(lim) if lim is not None else 'none'} | {verdict if verdict == 'ok' else f'**{verdict}**'} |"
                    for d, p, q, lim, verdict in v.memory_rows]
        out += ["", f"**{'verified: the re-run matches the prediction' if v.match else 'NOT verified'}**"
                + (f" ({markdown(v.error)})" if v.error else "")]
    return "\n".join(out) + "\n"


def graph_text(r: GraphReport, options) -> str:
    return render_graph(r.path, r.graph, r.solution, r.objective)


def graph_doc(r: GraphReport, options) -> str:
    return json.dumps(graph_json(r.graph, r.solution, r.objective), indent=2, default=jsonable) + "\n"


def jsonable(x):
    """numpy scalars and arrays as JSON values (``json.dumps(default=...)``)."""
    import numpy as np

    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
