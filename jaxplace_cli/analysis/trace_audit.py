"""Audit a foreign ``jax.profiler`` trace: a log dir (every host of one profiling run) or a
single ``.xplane.pb`` — GPU, TPU or ROCm, captured without jaxplace.

From native events alone a trace tells transfers per kind and device (with sizes where the
profiler wrote them), device execution time per device, XLA host-offload copies and step
counts. It does not tell the user's source lines, buffer identities or compile signatures,
so the rules that need those are listed as unsupported with the reason, never guessed.
Each host is summarised on its own, and all hosts merged: device names in the merged view
are qualified by host (``worker1/gpu:0``) because every host numbers its devices from 0.
"""
from __future__ import annotations

from jaxplace_cli.analysis import AuditResult, HostSummary, TraceInput
from jaxplace_cli.analysis.balance import DeviceLoad, balance_findings
from jaxplace_cli.analysis.findings import INFO, MEMORY_RULES, NEEDS_RUN, Finding, RuleConfig, selected, sort_findings
from jaxplace_cli.analysis.run import InputError
from jaxplace_cli.analysis.summary import DeviceOps, Summary, kind_totals, route_totals
from jaxplace_cli.model.events import HOST
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.sources.xplane import TraceData, TraceError, find_trace_files, list_runs, read_trace

TIME_KIND = "device execution time from the trace"


def summarize_trace(t: TraceData, min_bytes: int, prefix: str = "") -> Summary:
    """One host's TraceData as a Summary; ``prefix`` (``host/``) qualifies device names."""
    return _summary([(t, prefix)], min_bytes)


def _label(prefix: str, name: str) -> str:
    return f"{prefix}{name}" if prefix else name


def _summary(parts: list[tuple[TraceData, str]], min_bytes: int) -> Summary:
    transfers, offload, devices, by_dev = [], [], [], []
    for t, prefix in parts:
        if prefix:
            transfers += [x._replace(src=_label(prefix, x.src), dst=_label(prefix, x.dst))
                          for x in t.transfers]
            offload += [x._replace(src=_label(prefix, x.src), dst=_label(prefix, x.dst))
                        for x in t.offload_transfers]
        else:
            transfers += t.transfers
            offload += t.offload_transfers
        devices += [_label(prefix, d) for d in t.devices]
        by_dev += [DeviceOps(_label(prefix, d), t.device_op_count.get(d, 0), 0, [],
                             device_ns=int(t.device_op_ns.get(d, 0)))
                   for d in t.devices if t.device_op_count.get(d, 0)]
    totals, small, unknown = kind_totals(transfers, min_bytes)
    off_tot, off_small, off_unknown = kind_totals(offload, 0)
    routes = route_totals(((x.kind, x.src, x.dst, x.bytes, x.blocking) for x in transfers), min_bytes)
    return Summary(min_bytes, totals, small, unknown, [], sum(d.count for d in by_dev), by_dev, 0,
                   devices, routes, off_tot, off_unknown)


def _loads(parts: list[tuple[TraceData, str]]) -> tuple[dict[str, DeviceLoad], list[str]]:
    loads, devices = {}, []
    for t, prefix in parts:
        for d in t.devices:
            name = _label(prefix, d)
            devices.append(name)
            loads[name] = DeviceLoad(t.device_op_count.get(d, 0), int(t.device_op_ns.get(d, 0)))
    return loads, devices


def host_offload(summary: Summary, devices: list[str]) -> list[Finding]:
    """XLA host-offload copies (``copy-start`` to/from host memory space S(5)): real traffic,
    compiled into the program by memory-kind annotations or offloading remat policies. Not a
    mistake in itself, so ``info``; the size is what the user weighs against the HBM saved."""
    n = sum(v.count for v in summary.offload.values())
    unknown = sum(summary.offload_unknown_size.values())
    if not n and not unknown:
        return []
    b = sum(v.bytes for v in summary.offload.values())
    parts = [f"{v.count} {k} ({human_bytes(v.bytes)})" for k, v in summary.offload.items() if v.count]
    return [Finding(
        "host-offload", INFO,
        f"XLA host-offload copies between device and host memory: {n + unknown} copies, "
        + ", ".join(parts) + (f", {unknown} of unknown size" if unknown else "")
        + f"; {human_bytes(b)} in all (logical HLO shape sizes)",
        count=n + unknown, bytes=b,
        fix="expected with memory_kind='pinned_host' or offloading remat policies; check in "
            "the trace viewer that each copy-start overlaps compute (a copy-done waiting on it "
            "is exposed transfer time), and offload fewer/smaller activations if it does not",
        devices=devices)]


def audit_trace(path, cfg: RuleConfig, top_sites: int = 20, run: str | None = None,
                select: list[str] | None = None, ignore: list[str] | None = None) -> AuditResult:
    """Read every host's trace that ``path`` designates (newest profiling run unless ``run``
    names one) and audit it. Any unreadable input is an InputError (one line, exit 2)."""
    try:
        files = find_trace_files(path, run)
        runs = list_runs(path)
        traces = [read_trace(f) for f in files]
    except TraceError as exc:
        raise InputError(str(exc)) from None
    # a negative execution time can only come from a damaged or hand-made trace: counted as 0
    # and said (a note), never printed as "-5.0 ms" nor subtracted from a device's load
    negative = [d for t in traces for d, ns in t.device_op_ns.items() if ns < 0]
    for t in traces:
        t.device_op_ns.update({d: 0 for d, ns in t.device_op_ns.items() if ns < 0})
    chosen_run = files[0].parent.name if runs and files[0].parent.name in runs else None
    multi = len(traces) > 1
    hosts = [HostSummary(t.host, str(t.path), summarize_trace(t, cfg.min_bytes), t.source,
                         list(t.notes), t.step_count) for t in traces]
    parts = [(t, f"{t.host}/" if multi else "") for t in traces]
    merged = _summary(parts, cfg.min_bytes) if multi else hosts[0].summary
    offload_devs = sorted({_label(p, x.src if x.src != HOST else x.dst)
                           for t, p in parts for x in t.offload_transfers})

    rules = [r for r in selected(select, ignore) if r not in MEMORY_RULES]  # a run's rows only
    findings = []
    if "host-offload" in rules:
        findings += host_offload(merged, offload_devs)
    loads, devices = _loads(parts)
    copying = {x for r in merged.routes for x in (r.src, r.dst)}
    findings += balance_findings(loads, devices, cfg, TIME_KIND,
                                 select=[r for r in ("imbalance", "idle-device") if r in rules],
                                 copying=copying)

    notes = []
    if chosen_run is not None and len(runs) > 1:
        notes.append(f"{len(runs)} profiling runs in this log dir; audited "
                     + ("the newest, " if run is None else "") + f"{chosen_run} "
                     f"(choose with --run: {', '.join(runs)})")
    for h in hosts:
        notes += [f"{h.host}: {n}" if multi else n for n in h.notes]
    if negative:
        notes.append(f"the trace gives {len(negative)} device(s) a negative execution time "
                     f"({', '.join(sorted(set(negative))[:4])}); counted as 0: the file is damaged")
    unknown = sum(merged.unknown_size.values())
    if unknown:
        notes.append(f"{unknown} transfers have no size in this trace: they are counted under "
                     "'size unknown', not as 0 bytes; byte totals are lower bounds")
    if multi:
        notes.append(f"{len(hosts)} hosts: per-host totals under hosts[], merged totals above; "
                     "merged device names are host/device")
    unsupported = {r: f"needs a jaxplace run: {why}" for r, why in NEEDS_RUN.items() if r in rules}
    if unsupported:
        notes.append("not checked on a foreign trace (they need what only `jaxplace run "
                     "SCRIPT` records: user lines, buffer identities, compile signatures): "
                     + ", ".join(unsupported))
    notes.append("op time per device is device execution time from the trace (not host "
                 "dispatch time as for a jaxplace run)")
    return AuditResult(
        "trace", str(path), None, merged, sort_findings(findings), notes,
        hosts=hosts,
        rules_checked=[r for r in rules if r not in unsupported],
        rules_unsupported=unsupported,
        trace=TraceInput(chosen_run, runs, [str(f) for f in files]))
