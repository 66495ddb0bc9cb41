"""imbalance / idle-device over a recorded run (the judgement itself is analysis/balance.py)."""
from __future__ import annotations

import statistics
from collections import defaultdict

from jaxplace_cli.analysis.balance import DeviceLoad, balance_findings
from jaxplace_cli.analysis.rules.base import container_seqs
from jaxplace_cli.store import queries

TIME_KIND = ("host-side dispatch time of the op kinds run on several devices (each op "
             "counted at its kind's median)")


def run_loads(run, shared_only: bool = False) -> dict[str, DeviceLoad]:
    """Ops and dispatch time per device, from successful compute ops.

    device_put/device_get are transfers, not work; a partitioned jit call's own row repeats its
    segments. An op on several devices (sharded) counts on each. Time is *estimated*: each op
    counts the median dispatch time of its op name (over calls that did not compile), so a
    compile, a GC pause or a descheduled thread does not make a device look busy — host dispatch
    time measures how much work was sent, which is what differs between devices.
    ``shared_only``: only op names that ran on two or more devices — the work the program
    spreads over devices; a script that makes its data on one device and computes on another
    is not unbalanced, it is serial."""
    compiling = {c.op_seq for c in queries.compiles(run.store)}
    skip = container_seqs(run)
    rows = [op for op in queries.compute_op_costs(run.store) if op.seq not in skip]
    where: dict[str, set] = defaultdict(set)
    durs: dict[str, list] = defaultdict(list)
    all_durs: dict[str, list] = defaultdict(list)
    for op in rows:
        where[op.name].update(d for d in op.devices.split(",") if d)
        all_durs[op.name].append(max(op.dur_ns, 0))
        if op.seq not in compiling:
            durs[op.name].append(max(op.dur_ns, 0))
    if shared_only:
        rows = [op for op in rows if len(where[op.name]) >= 2]
    typical = {n: int(statistics.median(durs[n] or all_durs[n])) for n in all_durs}
    loads: dict[str, DeviceLoad] = {}
    for op in rows:
        ns = typical[op.name]
        for d in op.devices.split(","):
            if not d:
                continue
            load = loads.setdefault(d, DeviceLoad())
            load.ops += 1
            load.ns += ns
            load.site_ns[op.site] = load.site_ns.get(op.site, 0) + ns
    for load in loads.values():
        if load.site_ns:
            load.top_site = max(load.site_ns.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    return loads


def _devices(run, loads) -> list[str]:
    devs = run.manifest.device_names
    return devs + sorted(d for d in loads if d not in devs)


def imbalance(run, cfg):
    """Of the work spread over devices, the busiest did several times the least busy one's."""
    loads = run_loads(run, shared_only=True)
    return balance_findings(loads, _devices(run, loads), cfg, TIME_KIND, run.store.sites(),
                            select=("imbalance",))


def idle_device(run, cfg):
    """Devices the program had but never ran an op on, while others did."""
    loads = run_loads(run)
    copying = queries.transfer_endpoints(run.store)
    return balance_findings(loads, _devices(run, loads), cfg, TIME_KIND, select=("idle-device",),
                            copying=copying)
