"""The contract every stage shares: no JAX, and I/O only in the bounded reader.

``events`` (the event NamedTuples; the store's columns are generated from them), ``raw`` (the
hot path's raw rows before the store formats them), ``manifest`` (run.json as a dataclass,
checked field by field on read), ``errors`` (one base class carrying its exit code), ``sizes``
and ``paths`` (how sizes and source paths are parsed and shown), ``severity`` (a finding's
severities, worst first), ``budget_limits`` (each budget limit's file key, flag and pytest
keyword, from one table). Untrusted input passes two modules here (docs/security.md): ``safe``
(input text made safe for each output) and ``untrusted`` (budgets, rules files, manifests,
baselines and graphs read bounded).
"""
