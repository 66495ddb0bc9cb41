"""The audit rules, one module per concern; ``analysis.findings`` holds the registry.

Each rule is a pure function ``(run, cfg) -> list[Finding]`` over a recorded run: it reads
the event store and returns findings, never printing or mutating anything.
"""
