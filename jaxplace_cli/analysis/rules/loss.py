"""``recording-incomplete``: the run lost events, and how many (issue 25).

Not a rule a user selects or ignores: a run that lost data must never read as a clean one, so
``findings.run_rules`` adds it to every audit of a run (and ``loss_breaches`` to every budget
check), whichever command asked.

How many: what the recorder made (run.json ``events.ops``/``transfers``, written by the
process that recorded) minus what the store holds. When run.json was not finalised (the
process was killed, the disk was full), the writer's own ``progress`` table says what the
recorder had handed on; rows still in the killed process's buffers (its last 0.2 s) are not
known to anyone, and the message says so.
"""
from __future__ import annotations

from dataclasses import dataclass

from jaxplace_cli.analysis.rules.base import ERROR, Finding

RULE = "recording-incomplete"
COUNTED = ("ops", "transfers")
UNSEEN_S = 0.25  # what a SIGKILL can lose beyond the writer's counts (docs/reliability.md)


@dataclass
class Loss:
    lost: dict  # table -> events made but not stored
    made: dict  # table -> events made (or handed on, when the run was not finalised)
    cause: str
    final: bool  # run.json was finalised (its counts are the recorder's own)
    unrecorded: int = 0  # calls whose recording failed (the program kept its results)

    @property
    def total(self) -> int:
        return sum(self.lost.values()) + self.unrecorded


def _cause(text: str) -> str:
    low = text.lower()
    if "writer process" in low:
        return f"the writer process died ({text})"
    if any(w in low for w in ("full", "no space", "too large", "i/o error", "quota")):
        return f"the disk was full ({text})"
    if "removed or replaced" in low:
        return text
    return f"writing failed ({text})"


def recording_loss(run) -> Loss | None:
    """The run's loss, or None when everything the recorder made is in the store."""
    m = run.manifest
    store = run.store
    stored = {t: store.count(t) for t in COUNTED}
    progress = store.progress() or {}
    store_error = str(store.meta.get("write_error", ""))
    final = m.status != "running"
    if final:
        made = {"ops": m.events.ops, "transfers": m.events.transfers}
        error = m.events.write_error or store_error
        cause = _cause(error) if error else "events were not stored"
        if m.error.startswith("terminated by"):
            cause += f"; the script was {m.error}"
    else:
        made = {t: max(stored[t], progress.get(t, (0, 0))[0]) for t in COUNTED}
        cause = ("the recording process ended without finalising the run (killed, or still "
                 f"running); what it made in its last {UNSEEN_S} s is not counted")
        if store_error:
            cause += f"; {_cause(store_error)}"
    lost = {t: max(0, made[t] - stored[t]) for t in COUNTED}
    unrecorded = m.events.recording_errors if final else 0
    if final and not any(lost.values()) and not unrecorded:
        return None
    if unrecorded and not any(lost.values()):
        cause = f"recording failed on {unrecorded:,} calls (first: {m.events.recording_error})"
    return Loss(lost, made, cause, final, unrecorded)


def loss_findings(run) -> list[Finding]:
    loss = recording_loss(run)
    if loss is None:
        return []
    made = sum(loss.made.values())
    calls = f", {loss.unrecorded:,} calls not recorded" if loss.unrecorded else ""
    msg = (f"the recording lost {loss.total:,} of {made + loss.unrecorded:,} events ({loss.lost['ops']:,} ops, "
           f"{loss.lost['transfers']:,} transfers{calls}): {loss.cause}; totals and findings are lower bounds")
    return [Finding(RULE, ERROR, msg, count=loss.total,
                    fix="record the run again; make sure the disk has room and the process is "
                        "not killed before it ends")]


def loss_breaches(result) -> list:
    """A budget never passes on a run that lost data: one breach saying how much."""
    from jaxplace_cli.analysis.budget_file import Breach

    return [Breach(RULE, 0, f.count, f"{f.message}; a budget cannot pass on data that is not there")
            for f in result.findings if f.rule == RULE]
