"""imbalance / idle-device over a recorded run (the judgement itself is analysis/balance.py)."""
from __future__ import annotations

import statistics
from collections import defaultdict

from jaxplace_cli.analysis.balance import DeviceLoad, balance_findings
from jaxplace_cli.analysis.rules.base import TRANSFER_OPS, container_seqs
from jaxplace_cli.model.untrusted import compile_marker

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
    conn = run.store.conn
    compiling = set()
    for (value,) in conn.execute("SELECT value FROM markers WHERE kind = 'compile'"):
        compiling.add(compile_marker(value)["op_seq"])  # DataError: a damaged store
    skip = container_seqs(run)
    marks = ",".join("?" * len(TRANSFER_OPS))
    rows = [r for r in conn.execute(
        f"SELECT seq, devices, dur_ns, site, name FROM ops WHERE error = '' AND kind NOT IN ({marks})",
        TRANSFER_OPS) if r[0] not in skip]
    where: dict[str, set] = defaultdict(set)
    durs: dict[str, list] = defaultdict(list)
    all_durs: dict[str, list] = defaultdict(list)
    for seq, devices, dur, _, name in rows:
        where[name].update(d for d in devices.split(",") if d)
        all_durs[name].append(max(dur, 0))
        if seq not in compiling:
            durs[name].append(max(dur, 0))
    if shared_only:
        rows = [r for r in rows if len(where[r[4]]) >= 2]
    typical = {n: int(statistics.median(durs[n] or all_durs[n])) for n in all_durs}
    loads: dict[str, DeviceLoad] = {}
    for _, devices, _, sid, name in rows:
        ns = typical[name]
        for d in devices.split(","):
            if not d:
                continue
            load = loads.setdefault(d, DeviceLoad())
            load.ops += 1
            load.ns += ns
            load.site_ns[sid] = load.site_ns.get(sid, 0) + ns
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
    copying = {d for row in run.store.conn.execute(
        "SELECT DISTINCT src, dst FROM transfers") for d in row}
    return balance_findings(loads, _devices(run, loads), cfg, TIME_KIND, select=("idle-device",),
                            copying=copying)
