"""Implicit uploads whose host array is known (issue 26): the same array uploaded again
(avoidable: a warning) or new data at every call (a data loader: an info at most).

The capture gives each uploaded NumPy array an identity (the array it is or views whole, and
its sampled content: capture/jaxhooks/host_data.py; the transfer's ``buf`` < 0). Uploads of an
identity that was uploaded more than once are "the same data again": grouped per upload line,
argument (or the caller's container holding it) and the line that made the array, a warning when
the line ran ``loop_threshold`` times and carried as many calls; the count is the uploads (legs,
as the guard logs them). Uploads of identities seen once are a loader's new batches: one info per
line and API, with the host time of the calls that carried them, since only prefetching can hide
that upload. Runs recorded before identities existed (``buf`` 0) keep the rule of
rules/transfers.py. ``repeated_put``: the same for explicit ``jax.device_put`` calls (their
identities in ``host_put`` markers), the same array again only.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from jaxplace_cli.analysis.rules.base import INFO, WARNING, Finding, per_step, per_step_text, related, short, site_of
from jaxplace_cli.analysis.steps import detect_steps
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.store import uploads as q

_SUFFIXES = (" (numpy argument)", " (host data)")


def op_of(api: str) -> str:
    """``jit(step) (numpy argument)`` -> ``jit(step)``."""
    for s in _SUFFIXES:
        if api.endswith(s):
            return api[: -len(s)]
    return api


def known_data_findings(run, cfg, rows, steps, executions) -> list[Finding]:
    """Findings over ``rows`` (``implicit_uploads_with_data`` rows whose ``buf`` < 0).
    ``executions(events)`` counts how often each group's line ran (rules/executions.py)."""
    calls = defaultdict(set)  # identity -> the calls (op seqs) that uploaded it
    for r in rows:
        calls[r[5]].add(r[6] or -r[0])
    info = q.host_data(run.store)
    groups = defaultdict(lambda: {"calls": {}, "bytes": 0, "ids": set(),
                                  "devs": set(), "legs": []})
    events = []
    for seq, sid, api, nbytes, dst, buf, op_seq in rows:
        again = len(calls[buf]) > 1
        if again:
            d = info.get(buf)
            key = ("again", sid, api) + (_named(d) if d else ("", "", 0))
        else:
            key = ("new", sid, api)
        g = groups[key]
        g["calls"].setdefault(op_seq or -seq, seq)
        g["bytes"] += max(nbytes, 0)
        g["legs"].append((seq, max(nbytes, 0)))  # step(x, m, m) uploads m twice a call (the guard logs both)
        g["ids"].add(buf)
        g["devs"].add(dst)
        events.append((seq, sid, ("upload", api, nbytes), key))
    ran = executions(events)
    sites = run.store.sites()
    out = []
    waits = _waits(run, [g for k, g in groups.items() if k[0] == "new"])
    for key, g in groups.items():
        n = len(g["calls"])
        if n < cfg.loop_threshold or ran[key] < cfg.loop_threshold:
            continue
        legs = sorted(g["legs"])  # per step: the uploads, as the guard counts them
        ps = per_step([seq for seq, _ in legs], steps, [nb for _, nb in legs])
        if key[0] == "again":
            out.append(_again(key, g, n, ps, sites, info))
        else:
            out.append(_loader(key, g, n, ps, sites, waits))
    return out


def _again(key, g, n, ps, sites, info) -> Finding:
    _, sid, api, arg, var, made = key
    file, line, _ = site_of(sites, sid)
    b, k = g["bytes"], len(g["ids"])
    d = info.get(next(iter(g["ids"])))
    what = f"{d.dtype}[{','.join(map(str, d.shape))}] " if d and k == 1 else ""
    named = f"argument `{arg}` of {op_of(api)}" if arg else f"a NumPy argument of {op_of(api)}"
    made_at, rel = _made(sites, made)
    at = f", made at {made_at}" if made_at else ""
    how = _per_step(ps)
    u = len(g["legs"])
    calls = f" in {n} calls" if u != n else ""
    if k == 1:
        msg = (f"{named}: the same {what}host array{at} was uploaded {u} times{calls} at {short(file, line)} "
               f"({human_bytes(b)} in all{how}); JAX cannot keep a NumPy array on a device, so "
               "every call copies it again")
    else:
        msg = (f"{named}: {k} host arrays{at}, each uploaded more than once, made {u} uploads{calls} at "
               f"{short(file, line)} ({human_bytes(b)} in all{how}); every call copies its array again")
    name = _root(var) or (arg if k == 1 and _root(arg) == arg else "")  # consts['bias'] -> consts: the whole tree
    if name:
        fix = _put_once(name, made_at, "pass that")
    elif arg and k == 1:  # a leaf of a container made anew at every call (a loader's dict): the leaf
        fix = (f"jax.device_put the array passed as {arg} once, where it is made, and put the device array "
               "in its place: every call then reads it on the device")
    else:
        fix = "jax.device_put the data once before the loop and pass the device array to the call"
    return Finding("implicit-h2d-in-loop", WARNING, msg, file, line, u, b, fix=fix, related=rel,
                   devices=sorted(g["devs"]), per_step=ps)


def _made(sites, made: int) -> tuple[str, list]:
    """(``file:line`` of the line that made the array, its ``related`` entry), or ("", [])."""
    if not made:
        return "", []
    return short(*site_of(sites, made)[:2]), [related(sites, made, "the array is made here")]


def _put_once(name: str, made_at: str, then: str) -> str:
    """The fix both upload rules give for an array the caller holds under ``name``."""
    return (f"{name} = jax.device_put({name}) once, before the loop" + (f" (after {made_at})" if made_at else "")
            + f", and {then}: every call then reads it on the device")


def _named(d) -> tuple:
    """(argument, variable, made) a group of the same arrays again is named by: a leaf of a
    container the caller holds (``consts['bias']`` of ``step(x, consts)``) by the container, so
    its leaves are one finding with one fix (a review saw one per leaf, each fixing ``c['bias']``:
    the callee's name)."""
    root = _root(d.var)
    if root and root != d.var:
        return (_root(d.arg) or d.arg, root, d.made)
    return (d.arg, d.var, d.made)


def _root(var: str) -> str:
    """The caller's variable of ``var`` (``consts`` of ``consts['bias']``); "" if none."""
    root = var.split("[", 1)[0].split(".", 1)[0]
    return root if root.isidentifier() else ""


def _loader(key, g, n, ps, sites, waits) -> Finding:
    _, sid, api = key
    file, line, _ = site_of(sites, sid)
    b = g["bytes"]
    how = _per_step(ps)
    wait = waits.get(id(g), 0)
    spent = f"; each call took {wait / 1e6:.2f} ms of host time (median), upload included" if wait else ""
    u = len(g["legs"])
    calls = f" in {n} calls" if u != n else ""
    return Finding(
        "implicit-h2d-in-loop", INFO,
        f"{op_of(api)}: new host data at every call, {u} uploads of {len(g['ids'])} different arrays{calls} at "
        f"{short(file, line)} ({human_bytes(b)}, {human_bytes(b // n)} per call{how}{spent}); a data "
        "loader's batches must be uploaded, so this is no mistake",
        file, line, u, b,
        fix="to hide the upload, prefetch: jax.device_put the next batch while this step runs "
            "(a background thread, or flax.jax_utils.prefetch_to_device)",
        devices=sorted(g["devs"]), per_step=ps)


def _per_step(ps) -> str:
    how = f"; {per_step_text(ps)}" if per_step_text(ps) else ""
    if how and ps["bytes_median"]:
        how += f", {human_bytes(int(ps['bytes_median']))} per step"
    return how


def _waits(run, loaders) -> dict[int, int]:
    """id(group) -> median host time (ns) of the calls that carried a loader group's uploads
    (the median: the first call's compile is no part of a step's wait)."""
    seqs = [s for g in loaders for s in g["calls"] if s > 0]
    if not seqs:
        return {}
    durs = q.op_durations(run.store, min(seqs), max(seqs))
    return {id(g): int(statistics.median([max(durs.get(s, 0), 0) for s in g["calls"] if s > 0] or [0]))
            for g in loaders}


def split_rows(rows) -> tuple[list, list]:
    """(rows of uploads with a known host array, the others)."""
    known, rest = [], []
    for r in rows:
        (known if r[5] < 0 else rest).append(r)
    return known, rest




def repeated_put(run, cfg) -> list[Finding]:
    """``jax.device_put`` of the same host array, call after call at one line (``step(x,
    jax.device_put(mask))`` in a loop): every put copies it again. The capture gives each put
    of NumPy data its host arrays' identities (a ``host_put`` marker); a loader's puts carry a
    new array each time and are no finding (prefetching them is the fix for their wait)."""
    puts = q.host_puts(run.store)
    if len(puts) < cfg.loop_threshold:
        return []
    legs = defaultdict(list)  # op seq -> [(seq, site, bytes, dst)]
    for op_seq, seq, sid, nbytes, dst in q.explicit_uploads(run.store, min(puts), max(puts)):
        if op_seq in puts:
            legs[op_seq].append((seq, sid, max(nbytes, 0), dst))
    groups = defaultdict(list)  # (site, ids, devices) -> op seqs
    for op_seq, ids in puts.items():
        if legs[op_seq]:  # one array put on each of several devices (a loop over them) is no repeat
            dsts = tuple(sorted({dst for *_, dst in legs[op_seq]}))
            groups[(legs[op_seq][0][1], tuple(sorted(set(ids))), dsts)].append(op_seq)
    info = q.host_data(run.store)
    steps = None
    sites = run.store.sites()
    out = []
    for (sid, ids, _), calls in groups.items():
        mine = sorted(leg for c in calls for leg in legs[c])
        b = sum(nb for _, _, nb, _ in mine)
        if len(calls) < cfg.loop_threshold or b < cfg.min_bytes * len(calls):
            continue
        if steps is None:
            steps = detect_steps(run)
        ps = per_step([seq for seq, _, _, _ in mine], steps, [nb for _, _, nb, _ in mine])
        file, line, _ = site_of(sites, sid)
        d = info.get(ids[0]) if len(ids) == 1 else None
        what = f"{d.dtype}[{','.join(map(str, d.shape))}] " if d else ""
        made_at, rel = _made(sites, d.made if d else 0)
        at = f", made at {made_at}," if made_at else ""
        arrays = f"the same {what}host array{at}" if len(ids) == 1 else f"the same {len(ids)} host arrays"
        name = _root(d.var) if d else ""
        fix = (_put_once(name, made_at, "use that") if name else
               "jax.device_put the data once, before the loop, and reuse the device array")
        each = f" ({len(mine)} uploads: a leg per device)" if len(mine) != len(calls) else ""
        out.append(Finding(
            "repeated-put", WARNING,
            f"jax.device_put put {arrays} on the device {len(calls)} times{each} at {short(file, line)} "
            f"({human_bytes(b)} in all{_per_step(ps)}); it does not change, so every put copies it again",
            file, line, len(mine), b, fix=fix, related=rel, devices=sorted({dst for *_, dst in mine}), per_step=ps))
    return out
