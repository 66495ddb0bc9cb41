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
(reading the loss) closes it (``iteration_bounds``). The first step is warm-up (tracing +
compilation); "steady state" excludes it.
"""
from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from jaxplace_cli.analysis.run import RunData
from jaxplace_cli.analysis.stacks import MAX_DEPTH
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.store import queries
from jaxplace_cli.store.stacks import stack_nodes

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
    site: int = 0  # the step call's site (0: StepTraceAnnotation steps): which loop it is in


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
    bounds = iteration_bounds(run, seqs, at, end_seq)
    steps = [Step(i, f"{name} call {i + 1}", bounds[i], bounds[i + 1], i + 1, at[i]) for i in range(len(seqs))]
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
    return seqs[:end], [site.get(s, 0) for s in seqs[:end]]


def iteration_bounds(run, seqs: list[int], at: list[int], end_seq: int) -> list[int]:
    """The ``len(seqs) + 1`` seqs that cut the run into the loop's iterations, one per step call
    in ``seqs`` (made at the sites ``at``). Between two calls, the events of lines above the next
    call's in its function (``x = jax.device_put(batch)``, or a loader generator's put under the
    ``for`` line: a transfer's stack names that frame) open the next iteration, and those below
    the call before (``float(loss)``) close its iteration: a cut at the next call alone charged
    each batch's upload to the step before, and a clean loader loop failed
    ``--max-host-syncs-per-step 0`` at its last step. The first iteration starts at the run of
    events before the first call from lines that opened iterations; the last ends at the first
    event after the last call from a line that never closed one (the code after the loop).
    Between two loops that call the step function (``while err > tol: x = step(x)`` after a
    first loop), a line closes the first loop's iteration or opens the second's only if it
    did so inside that loop. Events of other functions go with their neighbours; with no
    line above the call, an iteration starts at its call."""
    calls = np.asarray(seqs, np.int64)
    if len(calls) < 2:
        return [*seqs, end_seq]
    ev_seq, key, line, call_line = _loop_lines(run, at)
    k = np.searchsorted(calls, ev_seq, side="right") - 1  # the interval after call k (the call: seq == calls[k])
    kk = np.clip(k, 0, len(calls) - 2)
    inside = (k >= 0) & (k < len(calls) - 1) & (ev_seq != calls[kk]) & (line >= 0)
    a, b = call_line[kk], call_line[kk + 1]
    post, pre = inside & (a >= 0) & (line > a), inside & (line < b)
    alike = a == b  # between two calls of one loop; else between two loops: a line closes (opens)
    for mask, own in ((post, a), (pre, b)):  # one there only if it did so inside its own loop
        pair = own * (1 << 32) + line
        mask &= alike | np.isin(pair, np.unique(pair[mask & alike]))
    last_post = calls[:-1].copy()
    np.maximum.at(last_post, k[post], ev_seq[post])
    bound = calls[1:].copy()
    pre &= ev_seq > last_post[kk]
    np.minimum.at(bound, k[pre], ev_seq[pre])
    between = (k >= 0) & (k < len(calls) - 1) & (ev_seq != calls[kk])
    opened = between & (ev_seq >= bound[kk])
    back = (line == call_line[0]) | np.isin(key, np.unique(key[opened]))
    first = int(np.searchsorted(ev_seq, calls[0]))  # the events before the first call: [:first]
    bad = np.flatnonzero(~back[:first])
    lo = int(bad[-1]) + 1 if bad.size else 0  # where the run of opening lines before it starts
    start = int(ev_seq[lo]) if lo < first else int(calls[0])
    ahead = (line == call_line[-1]) | np.isin(key, np.unique(key[between & ~opened]))
    last = int(np.searchsorted(ev_seq, calls[-1], side="right"))
    bad = np.flatnonzero(~ahead[last:])
    end = int(ev_seq[last + bad[0]]) if bad.size else end_seq
    return [start, *bound.tolist(), end]


def _loop_lines(run, at: list[int]) -> tuple:
    """Every op and transfer in seq order, as ``(seq, key, line, call_line)``: ``line`` is the
    event's line in the function of the step calls' most common site (the loop's; its own
    site's, or for a transfer made deeper, its stack's frame there; -1 for none),
    ``call_line`` each call's line there (-2 for a call from elsewhere), ``key`` the line as
    ``-line - 1`` where there is one, else the site."""
    sites = run.store.sites()
    loop = sites.get(Counter(at).most_common(1)[0][0])

    def here(s) -> bool:
        return s is not None and loop is not None and (s.file, s.function) == (loop.file, loop.function)

    seq, site = queries.event_sites(run.store)
    uniq, inv = np.unique(site, return_inverse=True)
    line = np.array([s.line if here(s := sites.get(u)) else -1 for u in uniq.tolist()] or [-1], np.int64)[inv]
    if loop is not None and getattr(run.store, "has_stacks", False):
        nodes, found = stack_nodes(run.store), {}
        t_seq, t_node = queries.transfer_stack_columns(run.store)
        for node in np.unique(t_node).tolist():
            n, depth = nodes.get(node), 0
            while n is not None and not here(n) and depth < MAX_DEPTH:
                n, depth = nodes.get(n.parent), depth + 1
            if n is not None and here(n):
                found[node] = n.line
        if found:
            mine = np.isin(t_node, list(found))
            where = np.searchsorted(seq, t_seq[mine])
            ok = (where < seq.size) & (seq[np.minimum(where, seq.size - 1)] == t_seq[mine])
            line[where[ok]] = [found[n] for n in t_node[mine][ok].tolist()]
    key = np.where(line >= 0, -line - 1, site)
    call_line = np.array([s.line if here(s := sites.get(a)) else -2 for a in at], np.int64)
    return seq, key, line, call_line


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
