"""What else ran on this box while the bench measured: the CPU time of the other processes.

Why: on a 2-core machine one busy process elsewhere changes every ratio (2026-12-06: a stray
``addr2line`` at 100 % of a core turned P2's ×1.13 into ×1.30 and P1's loop ratio with it), and
the load average printed before and after does not show it (it lags, and it counts the bench's
own processes). Each P-group is bracketed by two scans of ``/proc``: a process that is not the
bench or one of its descendants, present in both scans (same pid and start time), used the CPU
time between them. A process that starts and ends inside a group is not seen; the next group's
scans see a long one. Linux only: elsewhere nothing is measured (None).
"""
from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
BUSY_CORES = 0.05  # others used more than 5 % of a core on average: the group's ratios are not reliable


def _stat(pid: str) -> tuple[int, int, int] | None:
    """(ppid, start time, utime + stime in clock ticks) of one process; None once it is gone."""
    try:
        text = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the name may hold spaces and parentheses
    try:
        return int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None


def snapshot(root: int | None = None) -> dict | None:
    """CPU ticks of every process but ``root`` (default: this one) and its descendants, keyed by
    (pid, start time); None where there is no /proc."""
    root = os.getpid() if root is None else root
    try:
        pids = [p for p in os.listdir(PROC) if p.isdigit()]
    except OSError:
        return None
    procs = {}
    for pid in pids:
        st = _stat(pid)
        if st is not None:
            procs[int(pid)] = st
    ours = {root}
    for pid in procs:  # walk up each chain once; a chain that reaches root is ours
        chain, p = [], pid
        while p in procs and p not in ours and p > 1 and len(chain) < 4096:
            chain.append(p)
            p = procs[p][0]
        if p in ours:
            ours.update(chain)
    return {(pid, st[1]): st[2] for pid, st in procs.items() if pid not in ours}


def account(before: dict | None, after: dict | None, wall_s: float) -> dict:
    """The other processes' CPU seconds between two snapshots, and that as cores of the wall
    time (``busy``: over BUSY_CORES)."""
    if before is None or after is None:
        return {"others_cpu_s": None, "others_cores": None, "busy": None, "top": []}
    tick = os.sysconf("SC_CLK_TCK")
    used = {k: (after[k] - v) / tick for k, v in before.items() if k in after and after[k] > v}
    cpu = sum(used.values())
    cores = cpu / wall_s if wall_s > 0 else 0.0
    top = sorted(used.items(), key=lambda kv: -kv[1])[:3]
    return {"others_cpu_s": round(cpu, 2), "others_cores": round(cores, 3), "busy": cores > BUSY_CORES,
            "top": [{"pid": pid, "name": _name(pid), "cpu_s": round(s, 2)} for (pid, _), s in top]}


def _name(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()[:32]
    except OSError:
        return "?"
