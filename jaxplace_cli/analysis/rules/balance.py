"""imbalance / idle-device over a recorded run (the judgement itself is analysis/balance.py).

When is an idle device worth a finding? Only when the program could have used it:

* **the script asked for several devices**: its ops (no jaxplace policy placed any) ran on
  two or more devices, yet some device ran nothing — a warning (a mesh smaller than the
  machine, a device list that skips one);
* **the hardware has them and the work could use them**: every op ran on one device, nothing
  chose that device (no committed array: JAX's default placement put everything there, no
  policy placed anything), and the run holds at least two *independent chains* of one jit
  function — calls whose inputs do not descend from each other's outputs (trials of a sweep,
  independent models) — an info finding: ``--policy rr`` spreads the chains without a code
  change.

The script spread its work when the same op (by name) ran on two or more devices, or two devices'
spans of ops (first to last) overlap (a pipeline's stages): parameters made with
``jax.random`` on the default device and then put on the one device the loop trains on are serial
work, no spread (a review found a warning on such a script, 2026-12-07).

Not a finding: a device the script only staged data on (``pingpong_clean.py``), a single
dependent training loop on a multi-device machine (``mlp_clean.py`` with ``--devices 2``),
data committed to one device on purpose (``incompatible_devices_clean.py``), and devices a
placement policy was free to use but did not need (``placement_families.py``): where a policy
put the ops is its rules' decision, which ``pingpong`` and ``policy-fallback`` judge.
Before this rule, idle-device fired on 14 of 19 ``--devices 2`` sample runs, clean twins
included (issue 14); now only on ``imbalance_idle.py`` (script-asked, cpu:2) and on
``placement_trials.py`` without a policy (8 independent chains on cpu:0 of 4 devices).
"""
from __future__ import annotations

import weakref
from collections import Counter, defaultdict

from jaxplace_cli.analysis.balance import DeviceLoad, balance_findings, ops_text
from jaxplace_cli.analysis.rules.base import INFO, Finding, container_seqs, ids
from jaxplace_cli.model.events import OP_JIT
from jaxplace_cli.store import queries

TIME_KIND = ("host-side dispatch time of the op kinds run on several devices (each op "
             "counted at its kind's median)")
# What the placer writes in ``ops.placed`` when JAX decided after all (a failed policy).
_JAX_DECIDED = ("", "fallback")


def run_loads(run, shared_only: bool = False, own_only: bool = False,
              with_time: bool = True) -> dict[str, DeviceLoad]:
    """Ops and dispatch time per device, from successful compute ops.

    device_put/device_get are transfers, not work; a partitioned jit call's own row repeats its
    segments. An op on several devices (sharded) counts on each. Time is *estimated*: each op
    counts the median dispatch time of its op name (over calls that did not compile), so a
    compile, a GC pause or a descheduled thread does not make a device look busy — host dispatch
    time measures how much work was sent, which is what differs between devices.
    ``shared_only``: only op names that ran on two or more devices — the work the program
    spreads over devices; a script that makes its data on one device and computes on another
    is not unbalanced, it is serial. ``own_only``: only ops no policy placed (the script's own
    placement, or JAX's default). ``with_time=False``: ops counts only, ``ns`` left 0 (spares
    the medians: ~30 ms of a 9,000-op run's verdict, bench P2)."""
    groups = _op_groups(run, own_only)
    where: dict[str, set] = defaultdict(set)
    for name, devices, _, _ in groups:
        where[name].update(d for d in devices.split(",") if d)
    if shared_only:
        groups = [g for g in groups if len(where[g[0]]) >= 2]
    typical = _op_medians(run, own_only) if groups and with_time else {}
    loads: dict[str, DeviceLoad] = {}
    for name, devices, site, count in groups:
        ns = typical[name] if with_time else 0
        for d in devices.split(","):
            if not d:
                continue
            load = loads.setdefault(d, DeviceLoad())
            load.ops += count
            load.ns += ns * count
            load.site_ns[site] = load.site_ns.get(site, 0) + ns * count
    for load in loads.values():
        if load.site_ns:
            load.top_site = max(load.site_ns.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    return loads


_COSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _op_groups(run, own_only: bool) -> list:
    """(name, devices, site, count) groups of the run's compute ops, aggregated by SQLite;
    kept per run, as imbalance and idle-device read the same figures up to three times (a
    10M-event audit spent ~4 s on them before, bench P8)."""
    memo = _COSTS.setdefault(run.store, {})
    if ("groups", own_only) not in memo:
        memo["groups", False], memo["groups", True] = queries.compute_op_groups(
            run.store, _skip(run, memo), _JAX_DECIDED)
    return memo["groups", own_only]


def _skip(run, memo: dict) -> set[int]:
    if "skip" not in memo:
        memo["skip"] = container_seqs(run)
    return memo["skip"]


def _op_medians(run, own_only: bool) -> dict[str, int]:
    """Median dispatch ns per op name of the same ops (memoized alike), only when a load's
    time is read."""
    memo = _COSTS.setdefault(run.store, {})
    if ("medians", own_only) not in memo:
        compiling = {c.op_seq for c in queries.compiles(run.store)}
        placed_in = _JAX_DECIDED if own_only else None
        names = {g[0] for g in _op_groups(run, own_only)}
        memo["medians", own_only] = queries.compute_op_medians(run.store, _skip(run, memo), compiling,
                                                               placed_in, names)
    return memo["medians", own_only]


def _devices(run, loads) -> list[str]:
    devs = run.manifest.device_names
    return devs + sorted(d for d in loads if d not in devs)


def imbalance(run, cfg):
    """Of the work spread over devices, the busiest did several times the least busy one's."""
    loads = run_loads(run, shared_only=True)
    return balance_findings(loads, _devices(run, loads), cfg, TIME_KIND, run.store.sites(),
                            select=("imbalance",))


def idle_device(run, cfg):
    """Devices the run had that ran no op, when the program could have used them (module
    docstring: the two cases, and what is not a finding)."""
    loads = run_loads(run, with_time=False)
    devices = _devices(run, loads)
    used = [d for d in devices if loads.get(d, DeviceLoad()).ops > 0]
    idle = [d for d in devices if d not in used]
    if not used or not idle:
        return []
    own = run_loads(run, own_only=True, with_time=False)
    if sum(d.ops for d in own.values()) != sum(d.ops for d in loads.values()):
        return []  # a policy placed ops: where they (and the ops on their data) ran is its choice
    if len(used) >= 2:  # the script itself placed work on several devices
        shared = run_loads(run, shared_only=True, with_time=False)
        if sum(1 for d in shared.values() if d.ops > 0) < 2 and not _overlap(queries.compute_op_spans(run.store)):
            return []  # made its data on one device, computed on another: serial, not spread
        loads = run_loads(run)
        copying = queries.transfer_endpoints(run.store)
        return balance_findings(loads, devices, cfg, TIME_KIND, select=("idle-device",),
                                copying=copying, table_ops=table_ops(run))
    if _committed(run):
        return []  # the script chose its one device (device_put(x, device))
    chains = independent_chains(run)
    if chains is None:
        return []
    name, n_chains, calls, site = chains
    file, line = _site(run, site)
    return [Finding(
        "idle-device", INFO,
        f"{len(idle)} of {len(devices)} devices ran no ops ({', '.join(idle)}) while {used[0]} "
        f"ran all {ops_text(loads[used[0]].ops, table_ops(run), used)}: nothing chose a device, so JAX put everything on its "
        f"default device, yet the {calls} calls of {name} form {n_chains} independent chains "
        f"(no call reads another chain's results) that could run side by side",
        file, line, count=len(idle),
        fix="spread the chains without a code change: jaxplace run --policy rr (each chain "
            "stays on the device of its first op), or `with jaxplace_cli.device_placement(\"rr\"):` "
            "around the loop; or shard the data (jax.sharding)",
        devices=idle)]


def _overlap(spans: dict[str, tuple[int, int]]) -> bool:
    """Did two devices compute at the same time (their first-to-last op spans overlap: a
    pipeline's stages), rather than one after the other (parameters made on one, trained on
    another)?"""
    one = sorted(span for devices, span in spans.items() if "," not in devices)
    return any(b[0] < a[1] for a, b in zip(one, one[1:]))


def table_ops(run) -> dict[str, int]:
    """Ops per device as the audit's ops table counts them (``summary.summarize``'s query: an
    op on several devices counts on each)."""
    out: dict[str, int] = defaultdict(int)
    for d in queries.ops_per_devices(run.store):
        for dev in d.devices.split(","):
            if dev:
                out[dev] += d.count
    return out


def _committed(run) -> bool:
    """Did the program commit any array to a device (``device_put(x, device)`` and what is
    computed from it)? Then it chose its device."""
    return queries.committed_buffer_exists(run.store)


def _site(run, sid: int) -> tuple[str, int]:
    s = run.store.sites().get(sid)
    return (s.file, s.line) if s else ("", 0)


def independent_chains(run, candidates: int = 2):
    """``(name, chains, calls, site)`` of the jit function whose calls form the most chains
    that do not depend on each other (>= 2), else None. Only the ``candidates`` most called
    jit functions are followed (one pass over the ops each).

    A chain is followed forward along the data: a call whose inputs descend from no earlier
    call of the function starts a chain; a call (or any other op) reading a chain's results
    joins it, and an op reading two chains merges them. Data the chains share but did not
    make (a dataset, parameters made before the first call) does not merge them: reading the
    same input is no dependence."""
    # SQL picks the jit calls out (a Python pass over every op: 0.17 s of a 60k-op eager run's
    # 0.44 s verdict, for no jit call at all); first call's order, as before
    calls = Counter(name for _, name in queries.jit_calls(run.store))
    best = None
    for name in sorted((n for n in calls if calls[n] >= 2), key=lambda n: -calls[n])[:candidates]:
        n_chains, site = _chains_of(run, name)
        if n_chains >= 2 and (best is None or n_chains > best[1]):
            best = (name, n_chains, calls[name], site)
    return best


def _chains_of(run, name: str) -> tuple[int, int]:
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    chain_of: dict[int, int] = {}  # buffer id -> a chain label
    heads, sites = [], defaultdict(int)
    for op in run.store.ops():
        if op.error:
            continue
        labels = {find(chain_of[b]) for b in ids(op.in_bufs) if b in chain_of}
        if op.kind == OP_JIT and op.name == name:
            sites[op.site] += 1
            if not labels:
                parent[op.seq] = op.seq
                heads.append(op.seq)
                labels = {op.seq}
        if not labels:
            continue
        root, *rest = sorted(labels)
        for other in rest:
            parent[other] = root
        for b in ids(op.out_bufs):
            chain_of[b] = root
    top = max(sites.items(), key=lambda kv: (kv[1], -kv[0]))[0] if sites else 0
    return len({find(h) for h in heads}), top
