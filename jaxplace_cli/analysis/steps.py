"""Training steps: where they start and end, and per-step transfer statistics.

Two sources, best first, and the report says which was used:

1. ``jax.profiler.StepTraceAnnotation`` in the user's code (recorded as markers): the user's
   own step boundaries.
2. Otherwise the repeated pattern of jit calls. jit functions are told apart by identity, not
   by name: the capture names a second function that shares a name by its definition
   (``jit(f) [model.py:12]``), so three different functions named ``f`` are three candidates.
   A function called at least 3 times is a candidate; its calls cut the run into intervals,
   and the *shape* of an interval is the multiset of other jit functions called in it. The
   step is the candidate whose intervals are alike — more than 90 % of them (the first,
   warm-up interval left out) have the same shape — and, among those, the one called most
   often; a tie goes to the function called first in the iteration. So:

   * ``train(); eval(); eval()`` per iteration: ``eval``'s intervals alternate between
     ``{}`` and ``{train}``, ``train``'s are all ``{eval: 2}``: the step is ``train`` (the
     outermost of the repeated pattern), though ``eval`` is called twice as often;
   * an evaluation or checkpoint every 50 steps: ``train``'s intervals are alike 98 % of
     the time, the evaluation's 100 %, and ``train`` is called 50 times as often: the step is
     ``train``, not 50 of them;
   * 4 micro-batches then an update: the micro-batch function's intervals are alike only 75 %
     of the time (``{}`` three times, ``{update}`` once): the step is the update.

   When no candidate's intervals are alike, the most regular one is taken (then the least
   called). Known limit: an inner loop of more than 10 calls per outer iteration (an epoch of
   10 steps, or 11 micro-batches) is as regular as a training loop with an epoch boundary,
   and the more frequent function wins; ``StepTraceAnnotation`` says otherwise.

Calls of the step function after the loop, each from another line that called it once (a
final evaluation), are no steps. A step is one iteration of the loop around the calls: the work
on the loop's lines above the call (loading and putting the batch) opens it, the work below
(reading the loss) closes it (analysis/iterations.py). The first step is warm-up (tracing +
compilation); "steady state" excludes it.
"""
from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from jaxplace_cli.analysis.iterations import iteration_bounds
from jaxplace_cli.analysis.run import RunData
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.store import queries

ANNOTATION = "StepTraceAnnotation"
REPEATED_JIT = "repeated jit call"
NONE = "none"
MIN_CALLS = 3  # a function called fewer times is no loop
ALIKE = 0.9  # more than this share of a candidate's intervals must have one shape


@dataclass
class Step:
    index: int  # 0-based position in the run
    label: str
    start_seq: int
    end_seq: int  # exclusive
    number: int = 0  # as the script numbers it: StepTraceAnnotation's step_num, else index + 1
    loop: int = 0  # which loop of the script it is in (analysis/iterations.py; 0 for StepTraceAnnotation steps)


@dataclass
class StepInfo:
    method: str  # ANNOTATION | REPEATED_JIT | NONE
    detail: str  # e.g. the jit function's name
    steps: list[Step] = field(default_factory=list)
    warmup: int = 1  # leading steps excluded from steady state


def detect_steps(run: RunData) -> StepInfo:
    """The run's steps, computed once per opened run (five rules and the audit ask)."""
    cached = run.__dict__.get("_jaxplace_steps")
    if cached is None:
        cached = run.__dict__["_jaxplace_steps"] = _detect(run)
    return cached


def _detect(run: RunData) -> StepInfo:
    begins, ends = queries.step_markers(run.store)
    end_seq = queries.last_seq(run.store) + 1
    if begins:
        steps = []
        nums = [_step_num(v) for _, v in begins]
        own = all(n is not None for n in nums)  # the script numbered every step: its numbers
        for i, (seq, value) in enumerate(begins):
            nxt = begins[i + 1][0] if i + 1 < len(begins) else end_seq
            j = bisect.bisect_left(ends, seq)
            stop = ends[j] if j < len(ends) and ends[j] < nxt else nxt
            name, _, num = value.partition("\t")
            steps.append(Step(i, f"{name} {num}".strip(), seq, stop, nums[i] if own else i + 1))
        return StepInfo(ANNOTATION, begins[0][1].partition("\t")[0], steps)
    calls = queries.jit_calls(run.store)
    name = step_function([n for _, n in calls])
    if name is None:
        return StepInfo(NONE, f"no StepTraceAnnotation and no jit function called {MIN_CALLS} or more times")
    seqs, at = _in_the_loop(run, name, [s for s, n in calls if n == name])
    starts, ends, loops = iteration_bounds(run, seqs, at, end_seq)
    steps = [Step(i, f"{name} call {i + 1}", starts[i], ends[i], i + 1, loops[i]) for i in range(len(seqs))]
    return StepInfo(REPEATED_JIT, name, steps)


def _step_num(value: str) -> int | None:
    """The ``step_num`` a StepTraceAnnotation marker carries (``name\tnum``), None without one."""
    num = value.partition("\t")[2].strip()
    try:
        return int(num)
    except ValueError:
        return None


def step_number(info: StepInfo | None, i: int) -> int:
    """The number the script would print for the run's ``i``-th step (0-based): what budgets
    and findings say, so "step 50" is the script's step 50 (issue 26)."""
    if info is not None and 0 <= i < len(info.steps):
        return info.steps[i].number  # the script's step_num, 0 included (else i + 1: detect_steps)
    return i + 1


def _in_the_loop(run, name: str, seqs: list[int]) -> tuple[list[int], list[int]]:
    """The step function's calls without the trailing ones made once each from another line
    than the loop's (the line most of its calls come from): a final evaluation
    ``loss = step(params, test)`` after the loop is no training step N+1. A line that called
    it twice or more is a loop of its own, and its calls stay steps. Also each call's site."""
    site = {seq: sid for seq, n, sid, _ in queries.jit_ops(run.store) if n == name}
    per_line = Counter(site.get(s) for s in seqs)
    loop = per_line.most_common(1)[0][0]
    end = len(seqs)
    while end > MIN_CALLS and site.get(seqs[end - 1]) != loop and per_line[site.get(seqs[end - 1])] == 1:
        end -= 1
    return seqs[:end], [x if isinstance(x := site.get(s), int) else 0 for s in seqs[:end]]  # NULL: none


def step_function(names: list[str]) -> str | None:
    """The jit function (by its recorded, identity-unique name) whose calls are the steps of
    the sequence ``names`` of jit calls, or None (the method: the module docstring)."""
    positions: dict[str, list[int]] = defaultdict(list)
    for i, n in enumerate(names):
        positions[n].append(i)
    scored = []
    for name, pos in positions.items():
        if len(pos) < MIN_CALLS:
            continue
        shapes = [frozenset(Counter(names[a + 1:b]).items()) for a, b in zip(pos, pos[1:])]
        steady = shapes[1:] if len(shapes) > 2 else shapes
        share = Counter(steady).most_common(1)[0][1] / len(steady)
        scored.append((share > ALIKE, share, len(pos), -pos[0], name))
    if not scored:
        return None
    alike = [s for s in scored if s[0]]
    if alike:  # the most frequent of the regular ones, then the first called
        return max(alike, key=lambda s: (s[2], s[3]))[4]
    return max(scored, key=lambda s: (s[1], -s[2], s[3]))[4]


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


def per_step_transfers(run: RunData, info: StepInfo) -> dict[str, KindStepStats]:
    """Every transfer per step and kind, small ones included as in every other count (a 4-byte
    ``float(loss)`` a step is the host sync a user looks for here; transfers outside steps are
    not in any step)."""
    n = len(info.steps)
    stats = {k: KindStepStats([0] * n, [0] * n) for k in TRANSFER_KINDS}
    if not n:
        return stats
    starts = np.array([s.start_seq for s in info.steps], np.int64)
    ends = np.array([s.end_seq for s in info.steps], np.int64)
    # in numpy: a loop over the rows took 0.45 s of a 479k-transfer run's 2.4 s audit
    cols = queries.transfer_columns_from(run.store, int(starts[0]))
    seq, kind, nbytes = cols["seq"], cols["kind"], cols["bytes"]
    step = np.searchsorted(starts, seq, side="right") - 1
    inside = (step >= 0) & (seq < ends[np.maximum(step, 0)])
    exact = not nbytes.size or int(nbytes.max()) * nbytes.size < 1 << 63  # no int64 sum can overflow
    for code, k in enumerate(TRANSFER_KINDS):
        mine = inside & (kind == code)
        stats[k].counts[:] = np.bincount(step[mine], minlength=n).tolist()
        if exact:
            total = np.zeros(n, np.int64)
            np.add.at(total, step[mine], nbytes[mine])
            stats[k].bytes[:] = total.tolist()
        else:  # a damaged store's sizes near 2**63: Python's ints
            for i, b in zip(step[mine].tolist(), nbytes[mine].tolist()):
                stats[k].bytes[i] += b
    return stats
