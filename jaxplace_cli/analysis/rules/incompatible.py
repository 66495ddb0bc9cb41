"""Explain JAX's "Received incompatible devices for jitted computation" error."""
from __future__ import annotations

import re

from jaxplace_cli.analysis.lineage import origin, producers
from jaxplace_cli.analysis.rules.base import ERROR, Finding, ids, short, site_of
from jaxplace_cli.store import queries

_ARG = re.compile(r"argument (\S+) of (\S+) with shape (\S+?) and with device ids \[([^\]]*)\] "
                  r"on platform (\w+)")
_SHAPE = re.compile(r"^(\w+)\[([\d,]*)\]$")


def _parse_args(error: str) -> list[tuple[str, str, str, str]]:
    """(argument name, dtype, shape as the buffers table writes it, device) for each argument
    JAX names in the error; the device only when it is a single device."""
    out = []
    for name, _fun, shape, dev_ids, platform in _ARG.findall(error):
        m = _SHAPE.match(shape)
        dtype, dims = (m.group(1), m.group(2)) if m else ("", "")
        shape_s = "x".join(d for d in dims.split(",") if d) or "scalar"
        idl = [x.strip() for x in dev_ids.split(",") if x.strip()]
        dev = f"{platform.lower()}:{idl[0]}" if len(idl) == 1 else ""
        out.append((name, dtype, shape_s, dev))
    return out


def incompatible_devices(run, cfg) -> list[Finding]:
    """Two committed arguments on different devices: JAX refuses to guess where to run.

    JAX's message names the arguments' shapes and device ids but not where the arrays came
    from; this rule matches each named argument to the recorded buffer and walks its lineage
    to say where it was created and where (and by what) it was committed to its device."""
    sites = run.store.sites()
    failed = queries.ops_failed_with(run.store, "incompatible devices")
    if not failed:
        return []
    buffers = {b.buf: b for b in run.store.buffers()}
    prods = producers(run)
    out = []
    for op in failed:
        name = op.name
        file, line, _ = site_of(sites, op.site)
        bufs = [b for b in dict.fromkeys(ids(op.in_bufs)) if b in buffers]
        named = _parse_args(op.error)
        chosen: list[tuple[str, int]] = []
        used: set[int] = set()
        for arg, dtype, shape, dev in named:
            b = next((x for x in bufs if x not in used and buffers[x].shape == shape
                      and (not dtype or buffers[x].dtype == dtype)
                      and (not dev or buffers[x].device == dev)), 0)
            if b:
                used.add(b)
                chosen.append((arg, b))
        if not chosen:  # an error text this parser does not know: every committed argument
            chosen = [("", b) for b in bufs if buffers[b].committed]
        parts, rel, devs = [], [], []
        for arg, b in chosen:
            info = buffers[b]
            o = origin(b, prods, buffers)
            cf, cl, _ = site_of(sites, o.created_site)
            label = f"argument {arg}" if arg else "an argument"
            dims = "" if info.shape == "scalar" else info.shape.replace("x", ",")
            text = f"{label} ({info.dtype}[{dims}]) is on {info.device}: "
            if o.committed_site == o.created_site and o.created_by == "jax.device_put of host data":
                text += f"put there from host data and committed by jax.device_put at {short(cf, cl)}"
                rel.append({"file": cf, "line": cl,
                            "role": f"{label} put on {info.device} and committed here (jax.device_put)"})
            else:
                text += f"created at {short(cf, cl)} by {o.created_by}"
                rel.append({"file": cf, "line": cl, "role": f"{label} created here ({o.created_by})"})
                if o.committed_site:
                    kf, kl, _ = site_of(sites, o.committed_site)
                    text += f", committed to {info.device} at {short(kf, kl)} by {o.committed_by}"
                    rel.append({"file": kf, "line": kl,
                                "role": f"{label} committed to {info.device} here ({o.committed_by})"})
                elif info.committed:
                    text += ", committed"
            parts.append(text)
            devs.append(info.device)
        out.append(Finding(
            "incompatible-devices", ERROR,
            f"{name} at {short(file, line)} failed: its arguments are committed to different "
            "devices, and JAX will not choose one for you. " + "; ".join(parts),
            file, line, 1, 0,
            fix="device_put the arguments to one device before the call (or commit only one "
                "of them: an array created without a device follows the committed one)",
            related=rel, devices=sorted(set(devs))))
    return out
