"""The rich terminal report (also used for plain text: rich degrades without a TTY)."""
from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis import AuditResult
from ..sizes import human_bytes, human_ns

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


def render(result: AuditResult, console: Console) -> None:
    s = result.summary
    m = result.manifest
    title = f"jaxplace audit · {result.path}"
    console.print(Text(title, style="bold"))
    if result.source == "run":
        argv = " ".join(m.get("argv", []))
        console.print(f"script: {argv}   status: {m.get('status')} (exit {m.get('exit_code')})   "
                      f"policy: {m.get('policy')}   jax {m.get('jax_version', '?')}")
    console.print(f"devices: {', '.join(s.devices) or 'none recorded'}")
    for note in result.notes:
        console.print(Text(f"note: {note}", style="dim"))

    t = Table(title=f"Transfers (≥ {human_bytes(s.min_bytes)}; smaller counted apart)",
              title_justify="left")
    t.add_column("kind")
    t.add_column("count", justify="right")
    t.add_column("bytes", justify="right")
    t.add_column("small (<min)", justify="right")
    t.add_column("size unknown", justify="right")
    for kind, tot in s.totals.items():
        sm = s.small[kind]
        t.add_row(kind, f"{tot.count:,}", f"{human_bytes(tot.bytes)} ({tot.bytes:,} B)",
                  f"{sm.count:,} · {human_bytes(sm.bytes)}", f"{s.unknown_size.get(kind, 0):,}")
    console.print(t)

    if s.sites:
        st = Table(title="Top transfer sites (by bytes)", title_justify="left")
        for col in ("site", "kind", "count", "bytes", "how", "api", "route"):
            st.add_column(col, justify="right" if col in ("count", "bytes") else "left")
        for site in s.sites:
            how = ("implicit" if site.implicit else "explicit") + (", blocking" if site.blocking else "")
            st.add_row(f"{_short(site.file)}:{site.line}", site.kind, f"{site.count:,}",
                       human_bytes(site.bytes), how, site.api, ", ".join(site.routes))
        console.print(st)

    ot = Table(title=f"Ops per device ({s.ops_total:,} ops"
               + (f", {s.op_errors} failed" if s.op_errors else "") + ")", title_justify="left")
    ot.add_column("device")
    ot.add_column("ops", justify="right")
    ot.add_column("dispatch time", justify="right")
    ot.add_column("most frequent")
    for d in s.ops_by_device:
        ot.add_row(d.device, f"{d.count:,}", human_ns(d.dispatch_ns),
                   ", ".join(f"{n}×{c}" for n, c in d.top))
    console.print(ot)

    info = result.steps
    if info is not None and info.steps:
        stt = Table(title=f"Per step, steady state ({len(info.steps)} steps by {info.method}: {info.detail}; "
                    f"first {info.warmup} excluded as warm-up)", title_justify="left")
        for col in ("kind", "count min/median/max", "bytes min/median/max"):
            stt.add_column(col)
        for kind, st in result.step_transfers.items():
            d = st.summary(info.warmup)
            stt.add_row(kind, f"{d['min']}/{d['median']:g}/{d['max']}",
                        f"{human_bytes(d['bytes_min'])}/{human_bytes(int(d['bytes_median']))}/{human_bytes(d['bytes_max'])}")
        console.print(stt)
    elif info is not None:
        console.print(Text(f"steps: none detected ({info.detail})", style="dim"))

    if result.findings:
        console.print(Text(f"Findings ({len(result.findings)})", style="bold"))
        for f in result.findings:
            where = f"{_short(f.file)}:{f.line}" if f.file else ""
            console.print(Text.assemble((f"[{f.severity}] ", _SEVERITY_STYLE.get(f.severity, "")),
                                        (f"{f.rule} ", "bold"), (where, "underline")))
            console.print(f"    {f.message}", highlight=False)
            if f.fix:
                console.print(Text(f"    fix: {f.fix}", style="green"))
    else:
        console.print(Text("No findings.", style="green"))
