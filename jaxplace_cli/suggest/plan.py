"""From a recorded run to a plan: graph, solution, policy file, prediction, verify commands.

This is the one place that strings the steps together; each step lives in its own module
(from_run, solve, policy_file, predict) and stays a pure function of its inputs.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

import numpy as np

from jaxplace_cli.suggest.from_run import RunGraph, build_run_graph
from jaxplace_cli.suggest.groups import solve_by_group
from jaxplace_cli.suggest.model import OBJECTIVES, TOTAL, TRANSFERS, Solution, cost
from jaxplace_cli.suggest.policy_file import policy_rules, render_policy
from jaxplace_cli.suggest.predict import Traffic, expected, measure, predict
from jaxplace_cli.suggest.solve import solve_graph


@dataclass
class Memory:
    """Peak bytes per device (in ``devices`` order): what the recorded placement held (the
    model replaying the run), what the suggestion will hold, and the limit (None: none given;
    ``memory_limit.UNLIMITED`` for a device the limit does not name)."""

    devices: tuple
    recorded: list
    predicted: list
    predicted_seq: list
    limit: list | None = None
    moves: int = 0  # site/op groups the repair moved to fit the limit


@dataclass
class Plan:
    objective: str
    rg: RunGraph
    solution: Solution
    baseline: Traffic  # the model applied to where the ops actually ran
    predicted: Traffic  # the model applied to the suggestion
    measured: Traffic  # what the run recorded
    default: str
    rules: list
    policy_text: str
    script: list = field(default_factory=list)  # argv of the recorded script
    simulated_devices: int | None = None
    cwd: str = ""  # the recorded run's working directory (rules' file keys are relative to it)
    expected: Traffic | None = None  # what --verify compares with (predict.expected)
    memory: Memory | None = None  # device memory, predicted (suggest/memory_limit.py)

    @property
    def moved(self) -> np.ndarray:
        """Nodes the suggestion places elsewhere than where they ran."""
        return np.flatnonzero(self.solution.assign != self.rg.recorded)

    def verify_line(self, policy_path: str | None) -> str:
        """A command that works when pasted: in the recorded run's directory (the script
        and the rules' file keys are relative to it), the policy by absolute path."""
        policy = os.path.abspath(policy_path) if policy_path else "<this file>"
        cmd = shlex.join(self.run_command("POLICY")).replace("POLICY", shlex.quote(policy) if policy_path else policy)
        return (f"cd {shlex.quote(self.cwd)} && " if self.cwd else "") + cmd

    def run_command(self, policy_path: str, script: str | None = None, out: str | None = None) -> list[str]:
        """``jaxplace run`` arguments that replay the script under the suggested policy."""
        argv = list(self.script) or ["SCRIPT"]
        if script is not None:
            argv = [script] + argv[1:]
        cmd = ["jaxplace", "run"]
        if self.simulated_devices:
            cmd += ["--devices", str(self.simulated_devices)]
        cmd += ["--policy", policy_path]
        if out:
            cmd += ["--out", out]
        return cmd + argv


def make_plan(run, objective: str = TRANSFERS, devices: list[str] | None = None, seed: int = 0,
              balance: float | None = None, mem_cap: int | None = None,
              retarget_puts: bool = False, solver: str = "auto", policy_path: str | None = None,
              memory_limit: str | None = None, memory: bool = True) -> Plan:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    rg = build_run_graph(run, devices, retarget_puts)
    g = rg.graph
    if mem_cap is not None:
        g.mem_cap = np.full(g.k, int(mem_cap), dtype=np.int64)
    follow = np.zeros(g.n, dtype=bool)
    if g.n == 0:
        sol = Solution(np.zeros(0, dtype=np.int64), 0, "none", 0, True, 0.0, ["the run recorded no ops"])
    else:
        sol, follow = solve_by_group(g, rg.groups(),
                                     lambda gg: solve_graph(gg, objective, seed, balance, solver, hint=rg.recorded))
    mem = None
    if g.n and (memory or memory_limit is not None):  # ``memory``: predict the peaks (suggest/memory_limit.py)
        sol, follow, mem = _memory(run, rg, sol, follow, objective, balance, memory_limit)
    baseline = predict(rg, rg.recorded)
    predicted = predict(rg, sol.assign)
    measured = measure(run)
    default, rules = policy_rules(rg, sol.assign, follow)
    _explain(rg, sol.assign, follow, default, rules, predicted)
    manifest = run.manifest
    argv = list(manifest.argv)
    if manifest.target.kind == "module":
        argv = ["-m", *argv] if argv and argv[0] != "-m" else argv
    elif manifest.target.kind == "stdin":  # the program was piped in: the command names where it goes
        argv = ["SCRIPT", *argv[1:]]
    plan = Plan(objective, rg, sol, baseline, predicted, measured, default, rules, "", argv,
                manifest.simulated_devices, manifest.cwd)
    plan.policy_text = render_policy(default, rules, _header(plan, run, policy_path))
    plan.expected = expected(measured, baseline, predicted)
    plan.memory = mem
    return plan


def _memory(run, rg: RunGraph, sol: Solution, follow, objective: str, balance, limit_text: str | None):
    """The predicted peaks, and with ``--memory-limit`` the solution repaired to fit it
    (memory_limit.py says why a repair and not rows in the solvers)."""
    from dataclasses import replace

    from jaxplace_cli.suggest import memory_limit as ml
    from jaxplace_cli.suggest.groups import follow_mask
    from jaxplace_cli.suggest.model import partition_problem

    g = rg.graph
    if limit_text is not None and objective not in (TRANSFERS, TOTAL):
        raise ValueError(f"--memory-limit works with --objective transfers or total, not {objective}")
    limits = ml.parse_limits(limit_text, g.devices) if limit_text is not None else None
    model = ml.memory_model(run, rg)
    if model is None:
        if limits is not None:
            raise ValueError("--memory-limit: this run was recorded before jaxplace tracked device memory; "
                             "record it again")
        return sol, follow, None
    moves = 0
    if limits is not None:
        ml.refuse_impossible(model, rg, limits)
        p = partition_problem(g, objective, balance)
        assign, moves = ml.repair(model, p, g, rg.groups(), sol.assign, limits)
        if moves:
            sol = replace(sol, assign=assign, cost=cost(p, assign), optimal=False,
                          solver=f"{sol.solver} + memory repair",
                          notes=sol.notes + [f"--memory-limit: {moves} site/op group(s) moved to fit"])
            follow = follow_mask(g, rg.groups(), assign)
    rec, _ = model.peaks(rg.recorded)
    peak, at = model.peaks(sol.assign)
    return sol, follow, Memory(g.devices, rec.tolist(), peak.tolist(), at.tolist(),
                               limits.tolist() if limits is not None else None, moves)


def _explain(rg: RunGraph, assign, follow, default: str, rules: list, predicted: Traffic, limit: int = 200) -> None:
    """One line per rule: what it saves — the device-to-device traffic the prediction would
    gain if the ops it names followed ``[default]`` instead. ``follow``: the calls a
    ``device = "jax"`` rule leaves with their data."""
    from jaxplace_cli.model.events import D2D
    from jaxplace_cli.model.sizes import human_bytes

    if len(rules) > limit:
        return
    devices = rg.graph.devices
    d0 = devices.index(default)
    a = np.asarray(assign, dtype=np.int64)
    for rule in rules:
        mine = [v for v, nd in enumerate(rg.nodes) if nd.placeable and _matches(rule, nd)
                and ("jax" if follow[v] else devices[int(a[v])]) == rule["device"]]
        alt = a.copy()
        alt[mine] = d0
        other = predict(rg, alt)
        n = other.count(D2D) - predicted.count(D2D)
        b = other.bytes(D2D) - predicted.bytes(D2D)
        where = "where their data is (JAX decides)" if rule["device"] == "jax" else f"on {rule['device']}"
        rule["why"] = (f"{len(mine)} call(s) {where}: saves {n} d2d ({human_bytes(max(b, 0))}) "
                       f"against following [default]" if b > 0 else
                       f"{len(mine)} call(s) {where} (balance, compute time or a memory limit; no d2d saved)")


def _matches(rule: dict, nd) -> bool:
    import fnmatch

    if "op" in rule and not any(fnmatch.fnmatchcase(nd.name, p) for p in rule["op"]):
        return False
    if "occurrence" in rule and nd.occurrence != rule["occurrence"]:
        return False
    if "pass" in rule and nd.backward != (rule["pass"] == "backward"):
        return False
    if "site" in rule:
        file, _, lines = rule["site"].rpartition(":")
        lo, _, hi = lines.partition("-")
        if not fnmatch.fnmatchcase(nd.file, file) or not int(lo) <= nd.line <= int(hi or lo):
            return False
    return True


def _header(plan: Plan, run, policy_path: str | None = None) -> list[str]:
    s = plan.solution
    p = plan.predicted
    quality = "optimal" if s.optimal else (f"gap <= {s.gap:.1%} to its lower bound" if s.gap is not None
                                            else "heuristic, no bound")
    return [
        "Generated by `jaxplace suggest` (docs/suggest.md); edit freely.",
        f"run: {os.path.basename(os.path.normpath(str(run.path)))}   objective: {plan.objective}   "
        f"solver: {s.solver} ({quality})",
        "predicted transfers: " + ", ".join(f"{k} {p.count(k)} ({p.bytes(k)} B)" for k in ("h2d", "d2d", "d2h")),
        f"{len(plan.moved)} of {plan.rg.graph.n} ops placed differently from the recorded run"
        + ("; device_put targets changed: apply those in the script" if plan.rg.retarget_puts else ""),
        "verify: " + plan.verify_line(policy_path),
        "",
    ]
