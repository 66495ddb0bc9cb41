"""Compilations: a ``jax.monitoring`` listener turns each XLA backend compile into a marker.

The marker's value is JSON: the compiled function, the recorded op in flight (if any) and a
signature of that op's arguments, so the ``recompile`` rule can say *what changed* between
two compilations of one function (a shape, a dtype, a weak type, a static value, a device).
"""
from __future__ import annotations

import json

from jax.tree_util import tree_flatten

from jaxplace_cli.capture.jaxhooks.state import active, sharding_label, tls
from jaxplace_cli.model.events import OP_JIT

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def signature(args, kwargs) -> list[str]:
    """One short string per argument leaf: ``f32[32,128]`` (+ weak, device) or a static repr."""
    leaves, _ = tree_flatten((args, kwargs))
    out = []
    for leaf in leaves:
        aval = getattr(leaf, "aval", None)
        if aval is not None and hasattr(aval, "shape"):
            s = f"{aval.dtype}[{','.join(map(str, aval.shape))}]"
            if getattr(aval, "weak_type", False):
                s += " weak"
            sharding = getattr(leaf, "sharding", None)
            if sharding is not None:
                s += f" @{sharding_label(sharding)}"
            out.append(s)
        elif hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            out.append(f"numpy {leaf.dtype}[{','.join(map(str, leaf.shape))}]")
        else:
            r = repr(leaf)
            out.append(f"{type(leaf).__name__} {r[:40]}")
    return out


COMPILES = [0]  # backend compiles seen while recording: the trace window waits out warm-up


def on_duration_event(event: str, duration_secs: float, **kwargs) -> None:
    rec = active.rec
    if rec is None or event != BACKEND_COMPILE_EVENT:
        return
    COMPILES[0] += 1
    try:
        op = tls.op
        info = {"fun": str(kwargs.get("fun_name", "?")), "secs": round(float(duration_secs), 6)}
        if op is not None:
            name, seq, site, args, kw = op[:5]
            info.update(op=name, op_seq=seq, site=site)
            # a jit call's only (the recompile rule reads no other): another op's arguments may
            # be any object, and a repr can read device values (x.at[i]'s prints its array: a
            # device-to-host copy of jaxplace's making, recorded as the op's read)
            if op[6].kind == OP_JIT:
                info["signature"] = signature(args, kw)
        rec.marker("compile", json.dumps(info))
    except Exception:
        pass  # never disturb a compilation
