"""``jaxplace suggest``: the run's dataflow graph, placement solvers, the policy they write,
and the prediction a re-run verifies (docs/suggest.md).

Data flow, one module per step::

    from_run / from_json  ->  model.Graph  ->  solve (coarsen, mincut, milp, multilevel,
    schedule, pipeline)   ->  memory_limit (peaks; --memory-limit repair)  ->
    policy_file + predict  ->  plan  ->  render / verify / top

Public API (imported lazily, so importing this package does not load scipy):

- ``top_suggestion(run) -> Suggestion | None``: the one-line suggestion for the audit report;
- ``make_plan(run, objective, ...) -> Plan``: graph, solution, policy text, prediction (transfers,
  and each device's peak memory: ``Plan.memory``);
- ``load_graph_json(path) -> Graph`` and ``solve_graph(graph, objective, ...) -> Solution``.
"""
from __future__ import annotations

_EXPORTS = {
    "Suggestion": ".top", "top_suggestion": ".top",
    "Plan": ".plan", "make_plan": ".plan",
    "Graph": ".model", "Solution": ".model", "OBJECTIVES": ".model",
    "load_graph_json": ".from_json", "solve_graph": ".solve",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
