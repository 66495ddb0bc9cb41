"""Training steps: where they start and end, and per-step transfer statistics.

Two sources, best first, and the report says which was used:
1. ``jax.profiler.StepTraceAnnotation`` in the user's code (recorded as markers);
2. otherwise the most frequently called jit function (>= 3 calls) is taken as the step: step
   i runs from its i-th call to its (i+1)-th.
The first step is warm-up (tracing + compilation); "steady state" excludes it.
"""
from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field

from jaxplace_cli.analysis.run import RunData
from jaxplace_cli.model.events import OP_JIT, TRANSFER_KINDS

ANNOTATION = "StepTraceAnnotation"
REPEATED_JIT = "repeated jit call"
NONE = "none"


@dataclass
class Step:
    index: int
    label: str
    start_seq: int
    end_seq: int  # exclusive


@dataclass
class StepInfo:
    method: str  # ANNOTATION | REPEATED_JIT | NONE
    detail: str  # e.g. the jit function's name
    steps: list[Step] = field(default_factory=list)
    warmup: int = 1  # leading steps excluded from steady state


def detect_steps(run: RunData) -> StepInfo:
    conn = run.store.conn
    begins = conn.execute("SELECT seq, value FROM markers WHERE kind = 'step-begin' ORDER BY seq").fetchall()
    end_seq = (conn.execute("SELECT MAX(seq) FROM (SELECT seq FROM ops UNION ALL SELECT seq FROM transfers "
                            "UNION ALL SELECT seq FROM markers)").fetchone()[0] or 0) + 1
    if begins:
        ends = [s for (s,) in conn.execute("SELECT seq FROM markers WHERE kind = 'step-end' ORDER BY seq")]
        steps = []
        for i, (seq, value) in enumerate(begins):
            nxt = begins[i + 1][0] if i + 1 < len(begins) else end_seq
            j = bisect.bisect_left(ends, seq)
            stop = ends[j] if j < len(ends) and ends[j] < nxt else nxt
            name, _, num = value.partition("\t")
            steps.append(Step(i, f"{name} {num}".strip(), seq, stop))
        return StepInfo(ANNOTATION, begins[0][1].partition("\t")[0], steps)
    row = conn.execute("SELECT name, COUNT(*) AS c FROM ops WHERE kind = ? AND error = '' GROUP BY name "
                       "HAVING c >= 3 ORDER BY c DESC, name LIMIT 1", (OP_JIT,)).fetchone()
    if row is None:
        return StepInfo(NONE, "no StepTraceAnnotation and no jit function called 3 or more times")
    name = row[0]
    seqs = [s for (s,) in conn.execute("SELECT seq FROM ops WHERE kind = ? AND name = ? AND error = '' "
                                       "ORDER BY seq", (OP_JIT, name))]
    # The last call has no successor; what follows it is usually post-loop work (the final
    # float(loss), saving), so its step is cut to the median length of the others (in events).
    spans = [b - a for a, b in zip(seqs, seqs[1:])]
    last_end = min(end_seq, seqs[-1] + int(statistics.median(spans))) if spans else end_seq
    steps = [Step(i, f"{name} call {i}", s, seqs[i + 1] if i + 1 < len(seqs) else last_end)
             for i, s in enumerate(seqs)]
    return StepInfo(REPEATED_JIT, name, steps)


@dataclass
class KindStepStats:
    counts: list[int]  # per step
    bytes: list[int]

    def summary(self, warmup: int) -> dict:
        c, b = self.counts[warmup:] or self.counts, self.bytes[warmup:] or self.bytes
        if not c:
            return {"min": 0, "median": 0, "max": 0, "bytes_min": 0, "bytes_median": 0, "bytes_max": 0}
        return {"min": min(c), "median": statistics.median(c), "max": max(c),
                "bytes_min": min(b), "bytes_median": statistics.median(b), "bytes_max": max(b)}


def per_step_transfers(run: RunData, info: StepInfo, min_bytes: int) -> dict[str, KindStepStats]:
    """Transfers of at least ``min_bytes`` per step and kind (transfers outside steps ignored)."""
    n = len(info.steps)
    stats = {k: KindStepStats([0] * n, [0] * n) for k in TRANSFER_KINDS}
    if not n:
        return stats
    starts = [s.start_seq for s in info.steps]
    for seq, kind, nbytes in run.store.conn.execute(
            "SELECT seq, kind, bytes FROM transfers WHERE bytes >= ? AND seq >= ? ORDER BY seq",
            (min_bytes, starts[0])):
        i = bisect.bisect_right(starts, seq) - 1
        if i < 0 or seq >= info.steps[i].end_seq or kind not in stats:
            continue
        stats[kind].counts[i] += 1
        stats[kind].bytes[i] += nbytes
    return stats
