"""How many times a line of the user's program *ran*, as opposed to how many events it caused.

The rules that say "in a loop" (implicit-h2d-in-loop, host-sync-in-loop) must count
executions of the line, not calls on it: ``y = jnp.dot(w, X) + jnp.dot(X, w) + jnp.dot(X, X)``
run once with a NumPy ``X`` uploads ``X`` several times from one line that ran once, and
``mcmc.print_summary()`` after sampling reads many arrays from one line that ran once.

The store keeps a site per event, not the instruction, so an execution is recovered from the
order of events: the run's ops and the rule's events, in ``seq`` order, fall into *runs* — a
maximal stretch of consecutive events at one site inside one step (another site's event or a
step boundary ends a run). A run is one execution of its line, unless it is the same pattern
repeated (a one-line loop body, ``for _ in range(9): y = jnp.dot(w, X)``, or a comprehension):
then it is as many executions as the pattern repeats. Events compare by what they are (an op's
name; a transfer's API and bytes), so a library loop over differently shaped arrays inside one
call (print_summary's reads) stays one execution.
"""
from __future__ import annotations

import bisect
from collections import Counter

from jaxplace_cli.store import queries


def smallest_period(tokens: list) -> int:
    """The smallest p such that ``tokens[i] == tokens[i - p]`` for every i >= p (the prefix
    function's classic result, linear time); ``len(tokens)`` when nothing shorter repeats."""
    n = len(tokens)
    if n < 2:
        return n
    pi = [0] * n
    k = 0
    for i in range(1, n):
        while k and tokens[i] != tokens[k]:
            k = pi[k - 1]
        if tokens[i] == tokens[k]:
            k += 1
        pi[i] = k
    return n - pi[-1]


def line_executions(run, steps, events) -> Counter:
    """Executions per key: ``events`` are ``(seq, site, token, key)`` of the rule's own events
    (``key`` what the rule groups on, e.g. ``(site, api)``); the run's ops are merged in as the
    context that tells one execution of a line from the next. A key counts the runs holding
    one of its events, each run weighted by how often its pattern repeats."""
    stream = [(seq, site, tok, key) for seq, site, tok, key in events]
    stream += [(op.seq, op.site, ("op", op.kind, op.name), None) for op in queries.successful_ops(run.store)]
    stream.sort(key=lambda e: e[0])
    starts = [s.start_seq for s in steps.steps] if steps is not None and steps.steps else []
    out: Counter = Counter()
    cur_site, cur_step, toks, keys = None, None, [], set()

    def flush():
        if keys:
            reps = max(1, len(toks) // smallest_period(toks))
            for k in keys:
                out[k] += reps

    for seq, site, tok, key in stream:
        step = bisect.bisect_right(starts, seq) - 1 if starts else -1
        if site != cur_site or step != cur_step:
            flush()
            cur_site, cur_step, toks, keys = site, step, [], set()
        toks.append(tok)
        if key is not None:
            keys.add(key)
    flush()
    return out
