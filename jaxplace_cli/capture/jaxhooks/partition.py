"""``--granularity op``: place the primitives *inside* a jitted function.

The function is traced to a jaxpr once per argument signature; the policy decides a device
for every equation (control flow — scan, while, cond, nested jit — is one equation, placed as
a unit); consecutive equations on the same device and in the same pass (forward/backward)
form a segment; each segment is compiled on its own and runs on its device, and values that
cross segments are moved (recorded as transfers). Backward equations are recognised by the
``transpose(...)`` in their name stack, so ``pass = "backward"`` rules and the fwd/bwd audit
work. The computed values are the same as the unpartitioned function's: the same primitives
run on the same inputs, only their placement differs.
"""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from threading import get_ident
from time import perf_counter_ns

import jax
from jax._src import api as _api
from jax._src import core as _core
from jax._src import source_info_util
from jax.tree_util import tree_flatten, tree_unflatten

from jaxplace_cli.model.events import OP_SEGMENT, OpEvent
from jaxplace_cli.placement.opinfo import OpInfo, canonical


@dataclass
class Segment:
    device: object  # jax Device, or None = where the inputs are
    backward: bool
    names: list[str]
    invars: list
    outvars: list
    fn: object  # compiled segment


@dataclass
class Plan:
    segments: list[Segment]
    jaxpr: object  # ClosedJaxpr
    out_tree: object
    labels: list[str]


def _aval_sig(x):
    aval = getattr(x, "aval", None)
    if aval is not None:
        return (tuple(aval.shape), str(aval.dtype), bool(getattr(aval, "weak_type", False)))
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return (tuple(x.shape), str(x.dtype), False)
    return (type(x).__name__,)


def _static_key(spec, args, kwargs):
    parts = []
    for i, a in enumerate(args):
        if i in spec.static_argnums:
            parts.append(("pos", i, a))
    for k, v in sorted(kwargs.items()):
        if k in spec.static_argnames:
            parts.append(("kw", k, v))
    return tuple(parts)


def _eqn_info(placer, eqn, call_file, devices) -> OpInfo:
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    shapes = [tuple(v.aval.shape) for v in eqn.invars if hasattr(v.aval, "shape")]
    dtypes = [v.aval.dtype for v in eqn.invars if hasattr(v.aval, "dtype")]
    nbytes = 0
    for v in eqn.invars:
        aval = v.aval
        if hasattr(aval, "shape"):
            n = aval.dtype.itemsize
            for d in aval.shape:
                n *= d
            nbytes = max(nbytes, n)
    name = eqn.primitive.name
    return OpInfo(canonical(name), "eqn", (), shapes, dtypes, nbytes,
                  frame.file_name if frame else call_file, frame.start_line if frame else 0,
                  frame.function_name if frame else "",
                  "transpose" in str(eqn.source_info.name_stack), 0, devices, raw_name=name)


def build_plan(placer, rec, spec, jitted, args, kwargs, site) -> Plan:
    traced = jitted.trace(*args, **kwargs)
    closed = traced.jaxpr
    jaxpr = closed.jaxpr
    s = rec.site_info.get(site) if rec is not None else None
    call_file = s.file if s else ""
    devices = placer.allowed
    natural = _natural_device(args, kwargs)  # where JAX would run the whole call
    decisions = []
    for eqn in jaxpr.eqns:
        info = _eqn_info(placer, eqn, call_file, devices)
        device, label = placer.decide(info, rec)
        decisions.append((device or natural, info.backward, label, eqn))
    # group consecutive equations with the same device and pass
    groups: list[list] = []
    for d in decisions:
        if groups and groups[-1][0][0] == d[0] and groups[-1][0][1] == d[1]:
            groups[-1].append(d)
        else:
            groups.append([d])
    # liveness: which variables each segment must export
    used_later: list[set] = [set() for _ in groups]
    needed = {v for v in jaxpr.outvars if isinstance(v, _core.Var)}
    for gi in range(len(groups) - 1, -1, -1):
        used_later[gi] = set(needed)
        for _, _, _, eqn in groups[gi]:
            needed |= {v for v in eqn.invars if isinstance(v, _core.Var)}
    const_env = dict(zip(jaxpr.constvars, closed.consts))
    segments, labels = [], []
    for gi, group in enumerate(groups):
        eqns = [g[3] for g in group]
        defined = {v for e in eqns for v in e.outvars}
        invars, seen = [], set()
        for e in eqns:
            for v in e.invars:
                if isinstance(v, _core.Var) and v not in defined and v not in seen:
                    seen.add(v)
                    invars.append(v)
        outvars = [v for e in eqns for v in e.outvars if v in used_later[gi] and not isinstance(v, _core.DropVar)]
        sub_consts = [v for v in invars if v in const_env]
        sub_in = [v for v in invars if v not in const_env]
        with warnings.catch_warnings():  # a segment has no user-facing debug info to carry
            warnings.simplefilter("ignore", DeprecationWarning)
            sub = _core.Jaxpr(sub_consts, sub_in, outvars, eqns)
        consts = [const_env[v] for v in sub_consts]

        def run(*xs, _sub=sub, _consts=consts):
            return _core.eval_jaxpr(_sub, _consts, *xs)

        segments.append(Segment(group[0][0], group[0][1], [e.primitive.name for e in eqns],
                                sub_in, outvars, _api.jit(run)))
        labels.append(group[0][2])
    return Plan(segments, closed, traced.out_tree, labels)


def _natural_device(args, kwargs):
    """The device the unpartitioned call would use: a committed argument's, else the default."""
    for leaf in tree_flatten((args, kwargs))[0]:
        if isinstance(leaf, jax.Array) and getattr(leaf, "_committed", False):
            dev = _device(leaf)
            if dev is not None:
                return dev
    default = jax.config.jax_default_device
    if isinstance(default, jax.Device):
        return default
    return jax.devices()[0]


def run_partitioned(placer, rec, spec, jitted, args, kwargs, site, seq):
    """Execute a jitted call segment by segment; returns the same pytree the call would."""
    key = (id(jitted), _static_key(spec, args, kwargs))
    dyn = [a for i, a in enumerate(args) if i not in spec.static_argnums]
    dkw = {k: v for k, v in kwargs.items() if k not in spec.static_argnames}
    leaves, _ = tree_flatten([dyn, dkw])
    sig = (key, tuple(_aval_sig(x) for x in leaves))
    plan = placer.plans.get(sig)
    if plan is None:
        plan = placer.plans[sig] = build_plan(placer, rec, spec, jitted, args, kwargs, site)
    jaxpr = plan.jaxpr.jaxpr
    env, host = {}, {}
    for v, x in zip(jaxpr.invars, leaves):
        (env if isinstance(x, jax.Array) else host)[v] = x
    for seg, label in zip(plan.segments, plan.labels):
        device = seg.device
        # host data is uploaded where the first segment that reads it runs: not to the default
        # device and moved on (two legs for one), and never when no segment reads it (an
        # argument the program drops: JAX uploads none)
        for v in seg.invars:
            if v not in env and v in host:
                with jax.default_device(device) if device is not None else contextlib.nullcontext():
                    env[v] = jax.numpy.asarray(host[v])
        ins = [env[v] for v in seg.invars]
        sseq = rec.next_seq() if rec is not None else 0
        if device is not None:
            ins = [placer.move(x, device, rec, f"{spec.name}[{seg.names[0]}]", site, sseq, label)
                   if isinstance(x, jax.Array) and _device(x) != device else x for x in ins]
        t0 = perf_counter_ns()
        if device is not None:
            with jax.default_device(device):
                outs = seg.fn(*ins)
        else:
            outs = seg.fn(*ins)
        t1 = perf_counter_ns()
        for v, x in zip(seg.outvars, outs):
            env[v] = x
        if rec is not None:
            _record_segment(rec, spec, seg, label, ins, outs, site, sseq, t0, t1)
    flat_out = [(env[v] if v in env else jax.numpy.asarray(host[v])) if isinstance(v, _core.Var) else v.val
                for v in jaxpr.outvars]
    return tree_unflatten(plan.out_tree, flat_out)


def _device(x):
    return getattr(x.sharding, "_device", None)


def _record_segment(rec, spec, seg, label, ins, outs, site, seq, t0, t1):
    from jaxplace_cli.capture.jaxhooks.state import sharding_label

    def bufs(xs):
        out = []
        for x in xs:
            if isinstance(x, jax.Array):
                dev = sharding_label(x.sharding)
                out.append(rec.buffer_id(x, dev, getattr(x, "_committed", True), site, seq))
        return out

    dev = sharding_label(outs[0].sharding) if outs else (sharding_label(ins[0].sharding) if ins else "?")
    name = f"{spec.name}[{'+'.join(dict.fromkeys(seg.names))}]"
    rec.ops.append(OpEvent(seq, t0 - rec.t0, t1 - t0, get_ident(), OP_SEGMENT, name[:200], dev, site,
                           ",".join(map(str, bufs(ins))), ",".join(map(str, bufs(outs))), "",
                           seg.backward, label))
