"""recompile: a jitted function compiled again and again, and what changed each time."""
from __future__ import annotations

import re
from collections import Counter, defaultdict

from jaxplace_cli.analysis.rules.base import WARNING, Finding, related, site_of
from jaxplace_cli.store import queries

_PY_SCALARS = {"int", "float", "bool", "complex"}  # weakly typed when traced
_ARRAY = re.compile(r"^(numpy )?(\w+)\[([\d,]*)\]( weak)?(?: @(.+))?$")

# change kind -> how to avoid it
FIXES = {
    "shape": "pad or bucket inputs to a few fixed shapes (e.g. pad the last batch, round "
             "sequence lengths up to a multiple of 128)",
    "dtype": "cast inputs to one dtype before the call",
    "weak type": "pass arrays with a fixed dtype instead of Python scalars (jnp.float32(x)), "
                 "or make the scalar a static argument if it has few values",
    "static argument": "make the argument a traced (non-static) input, or keep it to a few "
                       "values; every new static value compiles the function again",
    "device": "device_put the inputs to one device; each device gets its own executable",
    "argument kind": "pass the same kind of value every call (always a jax.Array, or always "
                     "a numpy array)",
    "argument structure": "pass the same pytree structure every call (same number of leaves, "
                          "same container types)",
    "nothing in the signature": "create the jitted function once, outside the loop (jax.jit "
                                "of a new function object or lambda compiles again), and do "
                                "not clear its cache",
}


def parse_leaf(s: str) -> dict:
    """One signature string (capture/jaxhooks/compiles.py) as fields: ``float32[8,128] weak @cpu:0``,
    ``numpy float32[8]`` or a Python value ``int 3``."""
    m = _ARRAY.match(s)
    if m:
        return {"kind": "numpy" if m.group(1) else "array", "dtype": m.group(2),
                "shape": m.group(3), "weak": bool(m.group(4)), "device": m.group(5) or ""}
    typ, _, value = s.partition(" ")
    return {"kind": "python", "type": typ, "value": value}


def describe_changes(before: list[str], after: list[str]) -> list[tuple[str, str]]:
    """What differs between two compile signatures: ``[(change kind, text)]``.

    Pure and order-preserving; argument positions are 0-based leaf indices of the flattened
    ``(args, kwargs)``. A Python value that changed and still caused a compile is a static
    argument (a traced Python scalar does not recompile on a new value)."""
    if len(before) != len(after):
        return [("argument structure", f"{len(before)} -> {len(after)} argument leaves")]
    out = []
    for k, (a, b) in enumerate(zip(before, after)):
        if a == b:
            continue
        pa, pb = parse_leaf(a), parse_leaf(b)
        if pa["kind"] != pb["kind"]:
            scalar = {pa.get("type"), pb.get("type")} & _PY_SCALARS
            out.append(("weak type" if scalar else "argument kind", f"arg {k}: {a} -> {b}"))
            continue
        if pa["kind"] == "python":
            if pa["type"] != pb["type"]:
                out.append(("weak type", f"arg {k}: {a} -> {b}"))
            else:
                out.append(("static argument", f"arg {k}: {pa['value']} -> {pb['value']}"))
            continue
        shape = f"{pa['dtype']}[{pa['shape']}]", f"{pb['dtype']}[{pb['shape']}]"
        if pa["shape"] != pb["shape"]:
            out.append(("shape", f"arg {k}: {shape[0]} -> {shape[1]}"))
        if pa["dtype"] != pb["dtype"]:
            out.append(("dtype", f"arg {k}: {shape[0]} -> {shape[1]}"))
        if pa["weak"] != pb["weak"]:
            w = ("weak", "not weak") if pa["weak"] else ("not weak", "weak")
            out.append(("weak type", f"arg {k}: {shape[1]} {w[0]} -> {w[1]}"))
        if pa["device"] != pb["device"]:
            out.append(("device", f"arg {k}: {pa['device'] or '?'} -> {pb['device'] or '?'}"))
    return out or [("nothing in the signature", "same argument signature")]


def recompile(run, cfg) -> list[Finding]:
    """A jitted function compiled more than ``cfg.recompile_threshold`` times.

    Compile markers (capture/jaxhooks/compiles.py) name the compiled function and carry the
    signature of the jit call in flight; only compiles that happened during a user jit call
    and compiled that call's own function count (an eager ``jnp`` op compiling per new shape is
    JAX's own cache at work). Functions are keyed on identity: the capture records a second
    function that shares a name as ``jit(f) [file:line]`` (its definition), so three
    different functions named ``f`` are three functions compiled once each, while one
    function (or lambda) re-created and re-jitted in a loop is one function compiled again
    and again. Consecutive signatures are diffed to say *what* changed."""
    jit_ops = {seq: (name, site, devices) for seq, name, site, devices in queries.jit_ops(run.store)}
    groups = defaultdict(list)  # function name -> [(info, device)]
    for c in queries.compiles(run.store):  # DataError: a damaged marker (the store was altered)
        info = {**c._asdict(), "signature": list(c.signature)}
        op = jit_ops.get(c.op_seq)
        fun = info.get("fun") if op is not None else None
        if not isinstance(fun, str) or not (op[0] == fun or op[0].startswith(fun + " [")):
            continue
        groups[op[0]].append((info, op[2]))
    sites = run.store.sites() if groups else {}
    out = []
    for name, entries in groups.items():
        per_device = Counter(dev for _, dev in entries)
        if max(per_device.values()) <= cfg.recompile_threshold:
            continue
        infos = [info for info, _ in entries]
        n = len(infos)
        secs = sum(float(i.get("secs", 0)) for i in infos)
        pairs = [describe_changes(a.get("signature", []), b.get("signature", [])) for a, b in zip(infos, infos[1:])]
        changes = [c for pair in pairs for c in pair]
        kinds = Counter(k for pair in pairs for k in dict.fromkeys(k for k, _ in pair))  # per compile, not per leaf
        site_counts = Counter(i.get("site", 0) for i in infos)
        top = sorted(site_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        file, line, _ = site_of(sites, top[0][0])
        shown = [t for _, t in changes[:6]]
        more = f", and {len(changes) - 6} more" if len(changes) > 6 else ""
        what = ", ".join(f"{k} x{c}" for k, c in kinds.most_common())
        rel = [related(sites, s, f"{name} compiled here {c} times") for s, c in top]
        out.append(Finding(
            "recompile", WARNING,
            f"{name} was compiled {n} times"
            + (f" (up to {max(per_device.values())} on one device)" if len(per_device) > 1 else "")
            + f" ({secs:.2f} s compiling); what changed between "
            f"consecutive compiles: {what} ({'; '.join(shown)}{more})",
            file, line, n, 0,
            fix="; ".join(FIXES[k] for k, _ in kinds.most_common()),
            related=rel, time_ns=int(secs * 1e9)))
    out.sort(key=lambda f: (-f.count, -f.time_ns))
    return out
