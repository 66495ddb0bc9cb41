"""The per-process section of a ``jax.distributed`` job's audit (rich and text formats).

Called from one line of report/terminal.py, after the merged tables: the processes (how each
ended, its devices, its transfers and ops, its steps), the work per device, the jit calls that
span processes and the collectives each process's trace window shows. Renders
``AuditResult.distributed`` (analysis/distributed.py); prints nothing for a single run.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.summary import kind_all
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.safe import plain
from jaxplace_cli.model.sizes import human_bytes, human_ns


def render_job(console: Console, result: AuditResult) -> None:
    view = result.distributed
    if view is None:
        return
    how = plain(", ".join(x for x in (view.launcher, f"coordinator {view.coordinator}" if view.coordinator else "") if x))
    pt = Table(title=Text(f"Processes ({len(view.processes)} of {view.process_count}"
                          + (f"; {how}" if how else "") + ")"), title_justify="left")
    for col in ("process", "host", "ended", "devices", *TRANSFER_KINDS, "h2d/step", "ops", "steps"):
        pt.add_column(col, justify="left" if col in ("process", "host", "ended", "devices") else "right",
                      overflow="fold")
    for v in view.processes:
        moved = {k: kind_all(v, k) for k in v.totals}  # small ones too, as the merged totals above
        cells = [f"{moved[k].count:,} · {human_bytes(moved[k].bytes)}" if k in moved else "?" for k in TRANSFER_KINDS]
        per = v.step_medians.get("h2d")
        pt.add_row(Text(f"p{v.index}", style="bold red" if v.died else ""), Text(plain(v.host)),
                   Text(plain(v.ended)), Text(plain(", ".join(v.devices))), *cells,
                   human_bytes(int(per["bytes"])) if per else "", f"{v.ops:,}",
                   "" if v.steps is None else str(v.steps))
    console.print(pt)
    if view.devices:
        dt = Table(title="Work per device (a call counts on each of its process's devices)", title_justify="left")
        for col in ("device", "process", "ops", "dispatch time"):
            dt.add_column(col, justify="left" if col == "device" else "right")
        for w in view.devices:
            dt.add_row(Text(plain(w.device)), "?" if w.process is None else f"p{w.process}", f"{w.ops:,}",
                       human_ns(w.dispatch_ns))
        console.print(dt)
    _cross(console, view)


def _cross(console: Console, view) -> None:
    """jit calls that span processes (hooks) and the collectives the traces show."""
    if not view.spanning_calls and not view.collectives:
        return
    console.print(Text("Across processes", style="bold"))
    calls: dict[str, list] = {}
    for c in view.spanning_calls:
        calls.setdefault(c["name"], []).append(c)
    for name, cs in calls.items():
        per = ", ".join(f"p{c['process']} {c['count']:,}" for c in cs)
        console.print(Text(f"    {plain(name)}: calls over {cs[0]['devices']} devices of several processes ({per})"))
    for c in view.collectives:
        size = (f"{human_bytes(c.bytes_per_execution)} per execution" if c.bytes_per_execution is not None
                else "size not in the trace")
        execs = f" in {c.executions} executions" if c.executions else ""
        console.print(Text(f"    p{c.process}: {c.kind} in {plain(c.module or '?')}: {c.count:,} ops{execs} on "
                           f"{c.devices} devices, {human_ns(c.time_ns)}; {size} (trace window)"))
