"""Budget verdicts in words: the CLI's lines on stderr and the pytest-memray style sentences of
``jaxplace_cli.budget()`` and the pytest marker."""
from __future__ import annotations

from jaxplace_cli.model.paths import below as _rel
from jaxplace_cli.model.safe import plain
from jaxplace_cli.model.sizes import human_bytes


def verdict_lines(verdict) -> list[str]:
    """One ``jaxplace: budget: ...`` line per breach: what always reaches the CI log."""
    return [f"jaxplace: budget: {plain(br.message)}" for br in verdict.breaches] if verdict is not None else []


def failure_text(breaches, result) -> str:
    lines = [plain(breaches_sentence(b)) for b in breaches]
    out = "\n".join(lines)
    if result.summary.sites:
        out += "\n\nTop transfer sites:\n" + "\n".join(
            plain(f"  {_rel(s.file)}:{s.line} {s.kind} x{s.count} {human_bytes(s.bytes)} {s.api}")
            for s in result.summary.sites[:5])
    return out


def breaches_sentence(b) -> str:
    """pytest-memray style: 'Test was limited to 0 d2h transfers but did 3 (...)'.

    Whole-test limits are said about the test; per-step and finding breaches already name
    their step or rule, so their sentence is kept as the audit says it."""
    where = b.message[b.message.index(" ("):] if b.message.endswith(")") and " (" in b.message else ""
    kind, _, key = b.rule.partition(".")
    if key == "count":
        return f"Test was limited to {b.limit} {kind} transfers but did {b.actual}{where}"
    if key == "bytes":  # the limit as the user wrote it ("10 KB"), when known
        return (f"Test was limited to {getattr(b, 'limit_text', '') or human_bytes(b.limit)} of {kind} "
                f"transfers but moved {human_bytes(b.actual)}{where}")
    if b.rule == "pingpong":
        return f"Test was limited to {b.limit} ping-pong returns but did {b.actual}{where}"
    if b.rule == "recompiles":
        return f"Test was limited to {b.limit} recompiles but did {b.actual}{where}"
    return b.message
