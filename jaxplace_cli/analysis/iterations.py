"""Where one loop iteration ends and the next begins, around the calls of the step function.

Between two step calls, the events whose source line, in the function that makes the next call,
is above that call (``x = jax.device_put(batch)``; a loader generator's put counts at the
``for`` line: a transfer's recorded stack names that frame) open the next iteration, and those
below the call before (``float(loss)``) close its iteration. A cut at the next call alone
charged each batch's upload to the step before, and a clean loader loop failed
``--max-host-syncs-per-step 0`` at its last step (the read after the loop).

*Loops*: calls from sites whose runs of calls interleave (the two branches of an ``if``, an
epoch's train and eval loops) are one loop; sites called one after the other (a training loop,
then ``while err > tol: x = step(x)``) are two. Between two loops a line that lies between the
two calls closes the first loop's iteration or opens the second's only as it did inside its own
loop, and the code between the loops is in no step; within one loop (the branches of an ``if``)
it goes with the nearer call. The first iteration starts at the run of
events before the first call from keys (lines) that opened iterations; the last ends at the first
event after the last call from a key that never closed one (the code after the loop). Events of
other functions go with their neighbours; an op on the call's own line whose result is an input
of the next call (``step(p, jax.device_put(b))``'s put) opens its iteration (data flow: the line
alone cannot tell it from ``step(p, x)[1]``'s indexing); with neither, an iteration starts at its
call, as before. Known limit: a call statement over several lines is at its first line, so the
events of its argument lines below read as closing the iteration before."""
from __future__ import annotations

from collections import Counter

import numpy as np

from jaxplace_cli.analysis.rules.base import ids
from jaxplace_cli.analysis.stacks import stack_path
from jaxplace_cli.model.errors import DataError
from jaxplace_cli.store import queries
from jaxplace_cli.store.columns import event_sites, transfer_stack_columns
from jaxplace_cli.store.stacks import stack_nodes

MAX_FUNCTIONS = 3  # functions the step is called from that get lines (by calls): more is no loop
MAX_LINE = 1 << 30  # a line past this (a damaged store) is no line
MAX_SKIP = 500  # call-line sites left unread (SQLite's parameters; a real run has one or a few)


def loop_groups(at: list[int]) -> list[int]:
    """The loop of each call made at the sites ``at``, as the first call's index in it: sites
    whose spans of calls overlap are one loop."""
    span: dict[int, list[int]] = {}
    for i, s in enumerate(at):
        span.setdefault(s, [i, i])[1] = i
    group, end, first = {}, -1, 0
    for s, (lo, hi) in sorted(span.items(), key=lambda kv: kv[1]):
        if lo > end:
            first = lo
        group[s], end = first, max(end, hi)
    return [group[s] for s in at]


def iteration_bounds(run, seqs: list[int], at: list[int], end_seq: int) -> tuple[list[int], list[int], list[int]]:
    """(starts, ends, loops) of the iterations around the step calls ``seqs`` made at the sites
    ``at`` (``end`` exclusive; between two loops an end may lie before the next start)."""
    calls, n = np.asarray(seqs, np.int64), len(seqs)
    loops = loop_groups(at)
    if n < 2:
        return list(seqs), [end_seq] * n, loops
    ev_seq, key, lines, call_fn, call_line, skip = _lines(run, at)
    k = np.searchsorted(calls, ev_seq, side="right") - 1  # the interval after call k (the call: seq == calls[k])
    kk = np.clip(k, 0, n - 2)
    between = (k >= 0) & (k < n - 1) & (ev_seq != calls[kk])
    cols = np.arange(ev_seq.size)
    la = np.where(call_fn[kk] >= 0, lines[np.maximum(call_fn[kk], 0), cols], -1)  # line in call k's function
    lb = np.where(call_fn[kk + 1] >= 0, lines[np.maximum(call_fn[kk + 1], 0), cols], -1)
    # a call's own line is neither: the other call's statement (``-x`` in ``step(p, -x)`` in
    # an else branch below the if's call; the if's call's own uploads)
    post = between & (la >= 0) & (la > call_line[kk]) & (lb != call_line[kk + 1])
    pre = between & (lb >= 0) & (lb < call_line[kk + 1]) & (la != call_line[kk])
    both = post & pre  # a line between two calls: settled by what it did between calls of one site
    sites = np.asarray(at, np.int64)
    p_key, q_key = sites[kk] * MAX_LINE + la, sites[kk + 1] * MAX_LINE + lb
    seen_post = np.isin(p_key, np.unique(p_key[post & ~pre]))
    seen_pre = np.isin(q_key, np.unique(q_key[pre & ~post]))
    same_loop = np.asarray(loops, np.int64)[kk] == np.asarray(loops, np.int64)[kk + 1]
    closes, opens = seen_post & ~seen_pre, seen_pre & ~seen_post
    # unsettled within a loop (the two branches of an if: ``print(float(loss))`` under the if's
    # call, ``n = put(noise)`` above the else's): the nearer call's, closing on a tie; between
    # two loops: neither
    nearer = (la - call_line[kk]) <= (call_line[kk + 1] - lb)
    unsettled = both & ~closes & ~opens & same_loop
    post &= ~both | closes | (unsettled & nearer)
    pre &= ~both | opens | (unsettled & ~nearer)
    last_post = calls[:-1].copy()
    np.maximum.at(last_post, k[post], ev_seq[post])
    bound = calls[1:].copy()
    pre &= ev_seq > last_post[kk]
    np.minimum.at(bound, k[pre], ev_seq[pre])
    feed_k, feed_seq = _feeding(run, skip, calls)  # ``step(p, jax.device_put(b))``'s put
    inner = (feed_k >= 0) & (feed_seq > last_post[np.maximum(feed_k, 0)])
    np.minimum.at(bound, feed_k[inner], feed_seq[inner])
    # between two loops the first one's iteration ends after its last closing event or its
    # call's own events (its line: those at its site were not read, so up to the first other
    # event after it); what follows up to the next opening event is in no step
    own = between & ((ev_seq <= last_post[kk]) | (la == call_line[kk]))
    nxt = np.searchsorted(ev_seq, calls[:-1], side="right")
    closed = np.where(nxt < ev_seq.size, ev_seq[np.minimum(nxt, max(ev_seq.size - 1, 0))] if ev_seq.size else 0,
                      calls[1:])
    closed = np.maximum(closed, calls[:-1] + 1)
    np.maximum.at(closed, k[own], ev_seq[own] + 1)
    same = np.asarray(loops[:-1]) == np.asarray(loops[1:])
    ends = np.where(same, bound, np.minimum(closed, bound))
    opened = between & (ev_seq >= bound[kk])
    back = np.isin(key, np.unique(key[opened]))
    first = int(np.searchsorted(ev_seq, calls[0]))  # the events before the first call: [:first]
    bad = np.flatnonzero(~back[:first])
    lo = int(bad[-1]) + 1 if bad.size else 0  # where the run of opening keys before it starts
    start = int(ev_seq[lo]) if lo < first else int(calls[0])
    fed = feed_seq[(feed_k < 0) & ((feed_seq > ev_seq[bad[-1]]) if bad.size else True)]
    start = min(start, int(fed.min())) if fed.size else start
    ahead = np.isin(key, np.unique(key[between & ~opened]))
    last = int(np.searchsorted(ev_seq, calls[-1], side="right"))
    bad = np.flatnonzero(~ahead[last:])
    end = int(ev_seq[last + bad[0]]) if bad.size else end_seq
    return [start, *bound.tolist()], [*ends.tolist(), end], loops


def _lines(run, at: list[int]) -> tuple:
    """Every op and transfer in seq order, as ``(seq, key, lines, call_fn, call_line)``:
    ``lines[f]`` is each event's line in the f-th function the step is called from (its own
    site's, or for a transfer made deeper, its stack's frame there; -1 for none); ``call_fn``
    and ``call_line`` each call's function (-1: another) and line; ``key`` an event's first
    such (function, line) where it has one, else its site, negative and positive apart."""
    sites = run.store.sites()

    def where(s) -> tuple | None:
        return (s.file, s.function) if s is not None else None

    fns = [f for f, _ in Counter(where(sites.get(a)) for a in at).most_common(MAX_FUNCTIONS) if f is not None]
    index = {f: i for i, f in enumerate(fns)}
    calls_at = {(s.file, s.function, s.line) for a in set(at) if (s := sites.get(a)) is not None}
    skip = tuple(sorted(i for i, s in sites.items() if (s.file, s.function, s.line) in calls_at and isinstance(i, int)))
    seq, site = event_sites(run.store, skip[:MAX_SKIP])
    uniq, inv = np.unique(site, return_inverse=True)
    lines = np.full((max(len(fns), 1), seq.size), -1, np.int32)
    for f in range(len(fns)):
        per = [_line(s) if where(s := sites.get(u)) == fns[f] else -1 for u in uniq.tolist()]
        lines[f] = np.asarray(per or [-1], np.int32)[inv]
    if fns and getattr(run.store, "has_stacks", False):
        nodes = stack_nodes(run.store)
        t_seq, t_node = transfer_stack_columns(run.store)
        pos = np.searchsorted(seq, t_seq)
        ok = (pos < seq.size) & (seq[np.minimum(pos, max(seq.size - 1, 0))] == t_seq) if seq.size else pos < 0
        cache: dict = {}
        for f in range(len(fns)):
            found = {node: ln for node in np.unique(t_node).tolist()
                     if (ln := _frame_line(stack_path(node, ("?", 0, "?"), nodes, cache), fns[f])) >= 0}
            if found:
                mine = ok & np.isin(t_node, list(found))
                lines[f, pos[mine]] = [found[x] for x in t_node[mine].tolist()]
    first_f = np.argmax(lines >= 0, axis=0)
    line0 = lines[first_f, np.arange(seq.size)]
    key = np.where(line0 >= 0, -(first_f * MAX_LINE + line0) - 1, site)
    call_fn = np.array([index.get(where(sites.get(a)), -1) for a in at], np.int64)
    call_line = np.array([_line(sites.get(a)) if a in sites else -2 for a in at], np.int64)
    call_line[call_fn < 0] = -2
    return seq, key, lines, call_fn, call_line, skip


def _feeding(run, skip: tuple, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(interval, seq) of the eager ops on the step call's own line (the sites ``skip``) that
    make an input of the next step call: ``step(p, jax.device_put(b))``'s put, which opens that call's
    iteration (-1: before the first call). Found by data flow, since a line cannot tell them
    from ``step(p, x)[1]``'s indexing of the call before."""
    made = [(s, o) for s, o in queries.eager_ops_at_sites(run.store, skip[:MAX_SKIP]) if isinstance(o, str) and o]
    nxt = np.searchsorted(calls, np.asarray([s for s, _ in made], np.int64), side="right")
    wanted = [(s, o, j) for (s, o), j in zip(made, nxt.tolist()) if j < len(calls) and s != calls[j - 1]]
    inputs = queries.in_bufs_of(run.store, sorted({int(calls[j]) for _, _, j in wanted}))
    out = [(j - 1, s) for s, o, j in wanted if _shares(o, inputs.get(int(calls[j])))]
    return np.asarray([j for j, _ in out], np.int64), np.asarray([s for _, s in out], np.int64)


def _shares(outs: str, ins) -> bool:
    """Whether the comma-joined buffer ids ``outs`` and ``ins`` share one (text that is no id
    list, a damaged store: no)."""
    try:
        return isinstance(ins, str) and bool(set(ids(outs)) & set(ids(ins)) - {0})
    except DataError:
        return False


def _line(s) -> int:
    """A site's line, -1 for none a store could hold (a damaged one: text, 1e30)."""
    return _line_of(getattr(s, "line", None))


def _line_of(line) -> int:
    return line if isinstance(line, int) and 0 <= line < MAX_LINE else -1


def _frame_line(path: tuple, fn: tuple) -> int:
    """The line of the innermost frame of the stack ``path`` (outermost first: (file, line,
    function) each, ``analysis/stacks.stack_path``) in function ``fn``, or -1."""
    here = [frame for frame in path if (frame[0], frame[2]) == fn]
    return _line_of(here[-1][1]) if here else -1
