"""memory-growth, replicated, memory-imbalance over a run's device memory (analysis/memory.py).

Each is silent on a run recorded before memory tracking, and on the sample scripts' clean
twins (tests/test_memory_rules.py): growth needs live bytes rising at *every* steady-state
step (at least 3), by at least ``min_bytes`` a step and ``GROWTH_MIN_BYTES`` in all (a list of
4-byte losses, ``mlp_clean.py``, is not a leak worth a warning), replication at least ``REPLICATED_MIN_BYTES`` held twice or more, imbalance
two devices holding memory with the larger peak ``IMBALANCE_RATIO`` times the smaller and at
least ``IMBALANCE_MIN_BYTES`` apart.
"""
from __future__ import annotations

import numpy as np

from jaxplace_cli.analysis.memory import MemoryReport, growth, memory_report
from jaxplace_cli.analysis.memory_columns import live_pop, peak, series
from jaxplace_cli.analysis.rules.base import INFO, WARNING, Finding, short, site_of
from jaxplace_cli.analysis.steps import detect_steps
from jaxplace_cli.model.sizes import human_bytes

GROWTH_MIN_BYTES = 1 << 20  # growth over the steady steps worth a warning: 1 MiB
REPLICATED_MIN_BYTES = 1 << 20  # extra copies worth naming: 1 MiB
IMBALANCE_RATIO = 4.0
IMBALANCE_MIN_BYTES = 16 << 20


def report_of(run) -> tuple[MemoryReport | None, object]:
    """(memory report, steps) of ``run``, computed once per opened run (three rules, the audit)."""
    cached = run.__dict__.get("_jaxplace_memory")
    if cached is None:
        steps = detect_steps(run)
        cached = run.__dict__["_jaxplace_memory"] = (memory_report(run, steps), steps)
    return cached


def memory_growth(run, cfg) -> list[Finding]:
    """Live bytes on a device grow at every steady-state step: a leak. Named by the line whose
    arrays made in the steady steps are still live at the last step's end (most bytes)."""
    report, steps = report_of(run)
    if report is None:
        return []
    sites = run.store.sites()
    out = []
    steady_start = next((s.start_seq for s in steps.steps if s.index >= steps.warmup), 0)
    for dev, (per_step, ends) in growth(report, steps).items():
        if per_step < cfg.min_bytes or ends[-1] - ends[0] < GROWTH_MIN_BYTES:
            continue
        last_end = steps.steps[-1].end_seq - 1
        by_site: dict[int, int] = {}
        lv, ev = report.lives, report.events[dev]
        ent, held, _ = live_pop(ev.life, ev.delta, int(np.searchsorted(ev.seq, last_end, "right")), len(lv))
        for site, aseq, nbytes in zip(lv.site[ent].tolist(), lv.seq[ent].tolist(), held.tolist()):
            if aseq >= steady_start:
                by_site[site] = by_site.get(site, 0) + nbytes
        sid = max(by_site, key=lambda s: (by_site[s], -s)) if by_site else 0
        file, line, _ = site_of(sites, sid)
        gain = int(per_step)
        out.append(Finding(
            "memory-growth", WARNING,
            # measured at step ends: 7 steps are 6 increases (a review read "every one of 7")
            f"live device memory on {dev} grew in each of {len(ends) - 1} consecutive steady-state steps "
            f"(+{human_bytes(gain)} per step, {human_bytes(ends[0])} -> {human_bytes(ends[-1])}); "
            f"arrays made at {short(file, line)} stay live",
            file, line, count=len(ends) - 1, bytes=gain,
            fix="drop references to per-step results (a list that collects them, a cache keyed "
                "by step) or keep only what the next step needs",
            devices=[dev]))
    return out


def replicated(run, cfg) -> list[Finding]:
    """The same array held whole on several devices (a replicated sharding, or a placement
    that copies parameters onto every device): each copy past the first costs its bytes."""
    report, _ = report_of(run)
    if report is None:
        return []
    sites = run.store.sites()
    by_site: dict[int, list] = {}
    for _b, site, devs, nbytes, made, freed in report.replicated:
        acc = by_site.setdefault(site, [[], 0, set()])
        extra = nbytes * (len(devs) - 1)
        acc[0].append((made, extra))
        if freed is not None:
            acc[0].append((freed, -extra))
        acc[1] += 1
        acc[2].update(devs)
    out = []
    for sid, (changes, n, devs) in by_site.items():
        extra = _most_at_once(changes)
        if extra < REPLICATED_MIN_BYTES:
            continue
        file, line, _ = site_of(sites, sid)
        out.append(Finding(
            "replicated", INFO,
            f"{n} array{'s' if n != 1 else ''} made at {short(file, line)} held whole on "
            f"{len(devs)} devices: {human_bytes(extra)} of device memory in extra copies"
            + (" at most at once" if n > 1 else ""),
            file, line, count=n, bytes=extra,
            fix="shard the array over the devices (a PartitionSpec naming a mesh axis) or keep "
                "it on the devices that read it",
            devices=sorted(devs)))
    return out


def _most_at_once(changes: list[tuple[int, int]]) -> int:
    """The most bytes held at once by (seq, +bytes made / -bytes freed) changes: the copies of
    the arrays a line made that were alive together, not all it ever made (six generations of
    replicated parameters are one or two alive at a time; a review saw 18 MiB for a 2 MiB peak):
    the memory report's own series and peak over them."""
    changes = sorted(changes)
    seq = np.array([c[0] for c in changes], dtype=np.int64)
    return peak(*series(seq, np.array([c[1] for c in changes], dtype=np.int64)))[0]


def memory_imbalance(run, cfg) -> list[Finding]:
    """One device's peak several times another's, among devices that hold memory."""
    report, _ = report_of(run)
    if report is None:
        return []
    used = [d for d in report.devices if d.peak_bytes > 0]
    if len(used) < 2:
        return []
    hi = max(used, key=lambda d: d.peak_bytes)
    lo = min(used, key=lambda d: d.peak_bytes)
    if hi.peak_bytes < IMBALANCE_RATIO * lo.peak_bytes or hi.peak_bytes - lo.peak_bytes < IMBALANCE_MIN_BYTES:
        return []
    top = hi.at_peak[0] if hi.at_peak else None
    file, line = (top.file, top.line) if top else ("", 0)
    return [Finding(
        "memory-imbalance", INFO,
        f"device memory is uneven: {hi.device} peaks at {human_bytes(hi.peak_bytes)}, "
        f"{lo.device} at {human_bytes(lo.peak_bytes)}"
        + (f"; the largest holder at {hi.device}'s peak is {short(file, line)}" if top else ""),
        file, line, count=len(used), bytes=hi.peak_bytes - lo.peak_bytes,
        fix="place the largest arrays on the devices with room (a placement policy, or "
            "sharding them over a mesh)",
        devices=[hi.device, lo.device])]
