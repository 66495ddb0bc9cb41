"""What every rule shares: the Finding record, the thresholds, small lookups over a run."""
from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass, field

from jaxplace_cli.model.errors import DataError
from jaxplace_cli.model.events import OP_JIT, OP_SEGMENT
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.severity import ERROR, INFO, SEVERITIES, WARNING  # noqa: F401 - the rules import them from here
from jaxplace_cli.store import queries


@dataclass
class Finding:
    """One problem: where (the user's file:line), what it costs, how to fix it.

    ``count``/``bytes``/``time_ns`` are the cost in the rule's own unit (transfers, compiles,
    ops; bytes moved; seconds spent) — the message says which. ``per_step`` is set when the
    run's steps are known: ``{"steps", "method", "min", "median", "max"}`` of the count per
    step (steady state). ``related`` lists the other sites involved, ``devices`` the devices.
    """

    rule: str
    severity: str
    message: str
    file: str = ""
    line: int = 0
    count: int = 0
    bytes: int = 0
    fix: str = ""
    related: list[dict] = field(default_factory=list)  # other sites: {file, line, role}
    time_ns: int = 0
    devices: list[str] = field(default_factory=list)
    per_step: dict | None = None


@dataclass
class RuleConfig:
    """Thresholds of every rule (defaults are what `jaxplace audit` uses)."""

    min_bytes: int = 1024  # transfers smaller than this are not findings
    loop_threshold: int = 3  # a site repeating at least this often is "in a loop"
    uncommitted_threshold: int = 2  # copies of one uncommitted array before it is a finding
    recompile_threshold: int = 2  # a function compiled MORE than this many times is a finding
    imbalance_ratio: float = 4.0  # busiest device's op time >= ratio x the least busy one's
    imbalance_min_ops: int = 10  # ... and the busiest device ran at least this many ops


def site_of(sites: dict, sid: int) -> tuple[str, int, str]:
    s = sites.get(sid)
    return (s.file, s.line, s.function) if s else ("?", 0, "?")


def short(file: str, line: int | None = None) -> str:
    """``train.py:12`` — the file's base name, for messages (``file`` keeps the full path)."""
    return site_name(file, line)


def ids(text: str) -> list[int]:
    """The comma-joined buffer ids of an op row as ints (0 = not an array)."""
    try:
        return [int(x) for x in text.split(",") if x] if text else []
    except ValueError:  # not numbers, or more than 4,300 digits: not written by jaxplace
        raise DataError(f"ops: a buffer id list holds {text[:40]!r}, not comma-separated integers") from None


def related(sites: dict, sid: int, role: str) -> dict:
    file, line, _ = site_of(sites, sid)
    return {"file": file, "line": line, "role": role}


def container_seqs(run) -> set[int]:
    """Seqs of jit calls that ran partitioned (``--granularity op``).

    Their work is recorded again as ``segment`` ops, which produce the call's outputs; the
    call's own row would count that work twice and place it on one device."""
    seg_outs: set[int] = set()
    for op in queries.successful_ops_of_kind(run.store, OP_SEGMENT):
        seg_outs.update(ids(op.out_bufs))
    if not seg_outs:
        return set()
    out = set()
    for op in queries.successful_ops_of_kind(run.store, OP_JIT):
        o = ids(op.out_bufs)
        if o and all(b in seg_outs for b in o):
            out.add(op.seq)
    return out


def per_step(seqs: list[int], steps, nbytes: list[int] | None = None) -> dict | None:
    """Count per step (steady state, warm-up excluded) of events at ``seqs``; None if no steps.

    Events outside every step are not counted. Used to say "once per step" instead of a raw
    total, which depends on how long the script ran. With ``nbytes`` (one per seq) the median
    bytes per step is added as ``bytes_median``."""
    if steps is None or not steps.steps:
        return None
    starts = [s.start_seq for s in steps.steps]
    counts = [0] * len(starts)
    sizes = [0] * len(starts)
    for k, seq in enumerate(seqs):
        i = bisect.bisect_right(starts, seq) - 1
        if 0 <= i and seq < steps.steps[i].end_seq:
            counts[i] += 1
            if nbytes is not None:
                sizes[i] += nbytes[k]
    w = steps.warmup if len(counts) > steps.warmup else 0
    steady = counts[w:]
    out = {"steps": len(counts), "method": steps.method, "min": min(steady),
           "median": statistics.median(steady), "max": max(steady)}
    if nbytes is not None:
        out["bytes_median"] = statistics.median(sizes[w:])
    return out


def per_step_text(ps: dict | None) -> str:
    """``2 per step over 10 steps``; "" when the events fell outside the steady steps (never
    "0 per step")."""
    if not ps or not ps["max"]:
        return ""
    med = ps["median"]
    med_s = f"{med:g}"
    if ps["min"] == ps["max"]:
        return f"{med_s} per step over {ps['steps']} steps"
    return f"{ps['min']}-{ps['max']} per step (median {med_s}) over {ps['steps']} steps"
