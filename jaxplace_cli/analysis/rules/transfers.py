"""Rules over single transfers repeated at one line: host syncs, implicit uploads, and
uncommitted arrays copied on every use."""
from __future__ import annotations

import ast
import bisect
import re
from collections import Counter, defaultdict

from jaxplace_cli.analysis.rules.base import WARNING, Finding, per_step, per_step_text, related, short, site_of
from jaxplace_cli.analysis.rules.executions import line_executions
from jaxplace_cli.analysis.rules.uploads import known_data_findings, split_rows
from jaxplace_cli.analysis.steps import detect_steps
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.store import queries, uploads
from jaxplace_cli.store.site_text import site_texts

_READ_FIXES = {
    "repr()/print": "print every N steps, or use jax.debug.print inside the jitted function "
                    "(it does not block the host)",
    "str()/print": "print every N steps, or use jax.debug.print inside the jitted function "
                   "(it does not block the host)",
    "format()/print": "format every N steps, or use jax.debug.print inside the jitted function",
    "np.asarray()": "call x.copy_to_host_async() right after dispatching the step so the copy "
                    "overlaps compute, and convert it later; or read every N steps",
    "jax.device_get": "call x.copy_to_host_async() right after dispatching the step so the copy "
                      "overlaps compute, and device_get it later; or read every N steps",
}
_DEFAULT_READ_FIX = ("keep the value on device (accumulate with jnp) and read it every N "
                     "steps, or log it with jax.debug.callback from inside the jitted "
                     "function, or start x.copy_to_host_async() early and read it later")
_TEST_FIX = ("the loop tests a device value to decide whether to go on (a convergence test): run "
             "the whole loop on the device with jax.lax.while_loop (its cond_fun makes the test), "
             "or test every N iterations")
_READS = {"float", "int", "bool", "complex", "item", "tolist", "device_get", "asarray", "array"}


def _read_fix(api: str, text: str) -> str:
    """The fix for a blocking read by ``api`` on a line whose source is ``text``: a read that
    decides the loop's course (``if float(err) < tol: break``, ``while err > tol:``) cannot be
    read later or every N steps as a logged loss can; ``if verbose: print(float(loss))`` is
    a logged loss."""
    if api == "bool()" or _tests_a_read(text):
        return _TEST_FIX
    return _READ_FIXES.get(api, _DEFAULT_READ_FIX)


def _tests_a_read(text: str) -> bool:
    """Whether the source line ``text`` is an ``if``/``elif``/``while`` whose condition reads
    a value (``float(err) < tol``, ``loss.item() > 0``). Parsed, never run; bounded by the
    site text's 500 characters."""
    head = re.match(r"(el)?(if|while)\b", text)
    if head is None or len(text) > 500:
        return False
    src = text[len(head.group(1) or ""):]
    for candidate in (src, src + " pass", src + ":\n pass"):
        try:
            tree = ast.parse(candidate)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        node = tree.body[0] if tree.body else None
        test = getattr(node, "test", None)
        return test is not None and any(
            isinstance(n, ast.Call) and (getattr(n.func, "id", None) or getattr(n.func, "attr", None)) in _READS
            for n in ast.walk(test))
    return False


def host_sync_in_loop(run, cfg) -> list[Finding]:
    """Blocking device->host reads repeated at one line, in the loop: each one makes the host
    wait until the device has finished everything queued before it, and the device then idles
    until the host dispatches again, which serialises the training loop.

    "Blocking" is what the capture measured (capture/jaxhooks/syncs.py): a read of a value
    that was already computed, or behind which later work was queued (a logger reading the
    previous step's loss), does not stall the device and is not counted; of the arrays of one
    ``print()`` only the first waits. "In the loop": at least ``cfg.loop_threshold`` calls
    and, when the run's steps are known, in at least half of the steady-state steps — a read
    every 50 steps costs one stall in 50 and is not a finding. No size threshold: the typical
    offender is a 4-byte ``float(loss)``. Counted in calls: ``jax.device_get`` of a pytree
    reads every leaf but waits once. The line must have *run* ``cfg.loop_threshold`` times
    (rules/executions.py): many reads from one line that ran once (``mcmc.print_summary()``
    after the loop) are not a sync in the loop."""
    sites = run.store.sites()
    groups = defaultdict(dict)  # (site, api) -> {call: [first seq, bytes]}
    events = []
    for seq, sid, api, nbytes, op_seq in queries.blocking_reads(run.store):
        calls = groups[(sid, api)]
        call = calls.setdefault(op_seq or -seq, [seq, 0])  # one device_get of a pytree = one wait
        call[1] += max(nbytes, 0)
        events.append((seq, sid, ("read", api, nbytes), (sid, api)))
    steps = detect_steps(run) if groups else None
    ran = _executions(run, steps, events, groups, cfg)
    texts = site_texts(run.store) if groups else {}
    out = []
    for (sid, api), calls in groups.items():
        n = len(calls)
        if n < cfg.loop_threshold or ran[(sid, api)] < cfg.loop_threshold:
            continue
        seqs = [c[0] for c in calls.values()]
        sizes = [c[1] for c in calls.values()]
        share = steps_with(seqs, steps)
        if share is not None and share < 0.5:
            continue
        file, line, _ = site_of(sites, sid)
        ps = per_step(seqs, steps)
        how = f" ({per_step_text(ps)})" if per_step_text(ps) else ""
        out.append(Finding(
            "host-sync-in-loop", WARNING,
            f"{api} at {short(file, line)} made the host wait for the device {n} times{how}; "
            f"{human_bytes(sum(sizes))} read",
            file, line, n, sum(sizes),
            fix=_read_fix(api, texts.get((file, line), "")), per_step=ps))
    out.sort(key=lambda f: -f.count)
    return out


def _executions(run, steps, events, groups, cfg):
    """Executions of the lines of the groups that have enough events to matter (the merge
    with the run's ops is skipped when no group could be a finding)."""
    if not any(len(v[0] if isinstance(v, tuple) else v) >= cfg.loop_threshold for v in groups.values()):
        return defaultdict(int)
    return line_executions(run, steps, events)


def steps_with(seqs: list[int], steps) -> float | None:
    """The share of steady-state steps (warm-up excluded) holding at least one of ``seqs``,
    among the steps of the loop that holds most of them (a script that runs one step function
    in three loops reads in one of them); None when the run's steps are unknown."""
    if steps is None or not steps.steps:
        return None
    starts = [s.start_seq for s in steps.steps]
    hit = set()
    for seq in seqs:
        i = bisect.bisect_right(starts, seq) - 1
        if 0 <= i and seq < steps.steps[i].end_seq:
            hit.add(i)
    w = steps.warmup if len(starts) > steps.warmup else 0
    loop = Counter(steps.steps[i].loop for i in hit).most_common(1)[0][0] if hit else None
    steady = [i for i in range(w, len(starts)) if steps.steps[i].loop == loop]
    return sum(1 for i in steady if i in hit) / len(steady) if steady else 0.0


def implicit_h2d_in_loop(run, cfg) -> list[Finding]:
    """Host data (numpy arrays) passed to jit calls or ops over and over: every call uploads
    it again, on the critical path, because JAX cannot keep a host array on the device.
    "Over and over": the line ran at least ``cfg.loop_threshold`` times (rules/executions.py),
    so three uploads from one line that ran once are no finding. Where the capture knows which
    host array each upload carried, rules/uploads.py tells a loader's new data (info) from the
    same array again (warning); these are the uploads it does not know (older runs, scalars)."""
    known, rest = split_rows(uploads.implicit_uploads_with_data(run.store, cfg.min_bytes))
    sites = run.store.sites()
    groups = defaultdict(lambda: ([], [], set()))
    events = []
    for seq, sid, api, nbytes, dst, _, _ in rest:
        seqs, sizes, devs = groups[(sid, api)]
        seqs.append(seq)
        sizes.append(nbytes)
        devs.add(dst)
        events.append((seq, sid, ("upload", api, nbytes), (sid, api)))
    steps = detect_steps(run) if groups or known else None
    ran = _executions(run, steps, events, groups, cfg)
    out = known_data_findings(run, cfg, known, steps, lambda ev: line_executions(run, steps, ev)) if known else []
    for (sid, api), (seqs, sizes, devs) in groups.items():
        n, b = len(seqs), sum(sizes)
        if n < cfg.loop_threshold or ran[(sid, api)] < cfg.loop_threshold:
            continue
        file, line, _ = site_of(sites, sid)
        ps = per_step(seqs, steps, sizes)
        how = f"; {per_step_text(ps)}" if per_step_text(ps) else ""
        if how and ps["bytes_median"]:
            how += f", {human_bytes(int(ps['bytes_median']))} per step"
        out.append(Finding(
            "implicit-h2d-in-loop", WARNING,
            f"{api}: host data uploaded implicitly {n} times at {short(file, line)} "
            f"({human_bytes(b)} total, {human_bytes(b // n)} per call{how})",
            file, line, n, b,
            fix="jax.device_put the data once before the loop (or prefetch the next batch to "
                "the device while this step runs) instead of passing numpy arrays to the call",
            devices=sorted(devs), per_step=ps))
    out.sort(key=lambda f: -f.bytes)
    return out


def uncommitted_copy(run, cfg) -> list[Finding]:
    """The same uncommitted array copied to another device again and again.

    An uncommitted array (created without a device) used together with arrays committed to
    another device is copied there for the call, but the copy is thrown away: the array stays
    where it was, so the next use copies it again (docs/jax-facts.md, fact 6). An array counts when it
    was copied at least ``cfg.uncommitted_threshold`` times; arrays created at the same line
    (a new one each iteration) and copied along the same route are one finding. New arrays from
    one line copied once each count too, when at least ``cfg.loop_threshold`` of them were (a
    batch made on the default device for a step committed elsewhere): a finding of their own,
    with its own fix (make them there)."""
    sites = run.store.sites()
    per_buf = defaultdict(lambda: {"seqs": [], "bytes": 0, "sites": defaultdict(int)})
    for seq, buf, src, dst, nbytes, sid in queries.uncommitted_copies(run.store):
        g = per_buf[(buf, src, dst)]
        g["seqs"].append(seq)
        g["bytes"] += max(nbytes, 0)
        g["sites"][sid] += 1
    repeated = {k for k, g in per_buf.items() if len(g["seqs"]) >= cfg.uncommitted_threshold}
    if not repeated and len(per_buf) < cfg.loop_threshold:
        return []
    wanted = {k[0] for k in per_buf}
    created = {b.buf: b for b in run.store.buffers() if b.buf in wanted}
    groups = defaultdict(lambda: {"bufs": [], "seqs": [], "bytes": 0, "sites": defaultdict(int)})
    for (buf, src, dst), g in per_buf.items():
        o = created.get(buf)
        key = ("again" if (buf, src, dst) in repeated else "anew",) + (
            (o.site, o.shape, o.dtype) if o is not None else (0, "", ""))
        agg = groups[key + (src, dst)]
        agg["bufs"].append(buf)
        agg["seqs"].extend(g["seqs"])
        agg["bytes"] += g["bytes"]
        for sid, c in g["sites"].items():
            agg["sites"][sid] += c
    steps = detect_steps(run)
    out = []
    for (kind, osite, shape, dtype, src, dst), g in groups.items():
        n, n_arr = len(g["seqs"]), len(g["bufs"])
        # anew: one copy each, but a new array from one line every time (a batch made on the default
        # device for a step committed elsewhere): a copy per iteration all the same (a review's find)
        if g["bytes"] < cfg.min_bytes or (kind == "anew" and (not osite or n_arr < cfg.loop_threshold)):
            continue
        top = sorted(g["sites"].items(), key=lambda kv: (-kv[1], kv[0]))
        file, line, _ = site_of(sites, top[0][0])
        rel = [related(sites, s, f"copied to {dst} here {c} times") for s, c in top]
        what = "an uncommitted array was" if n_arr == 1 else f"{n_arr} uncommitted arrays were each"
        if osite:
            of, ol, _ = site_of(sites, osite)
            what = (f"the uncommitted {shape} {dtype} array created at {short(of, ol)} was"
                    if n_arr == 1 else
                    f"{n_arr} uncommitted {shape} {dtype} arrays created at {short(of, ol)} "
                    "(a new one each time) were each")
            rel.append({"file": of, "line": ol, "role": f"created here (uncommitted, on {src})"})
        ps = per_step(sorted(g["seqs"]), steps)
        how = f" ({per_step_text(ps)})" if per_step_text(ps) else ""
        where = ", ".join(short(*site_of(sites, s)[:2]) + (f" x{c}" if len(top) > 1 else "")
                          for s, c in top)
        if kind == "again":
            msg = (f"{what} copied from {src} to {dst} again and again: {n} copies{how} "
                   f"({human_bytes(g['bytes'])}) at {where}; the array never moves, so every use copies it again")
            fix = (f"jax.device_put it to {dst} once, where it is created: that commits it there, "
                   "and every later use reads it in place")
        else:
            msg = (f"{what} made on {src} and copied to {dst}: {n} copies{how} ({human_bytes(g['bytes'])}) "
                   f"at {where}; each is made on the default device and moved for the call")
            fix = (f"make them on {dst}: from inputs already there (a PRNG key or data put on {dst} once), "
                   f"or inside `with jax.default_device(...)` for {dst}")
        out.append(Finding("uncommitted-copy", WARNING, msg, file, line, n, g["bytes"], fix=fix,
                           related=rel, devices=[src, dst], per_step=ps))
    out.sort(key=lambda f: -f.bytes)
    return out
