"""The rich terminal report (also used for plain text: rich degrades without a TTY)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.model.paths import below
from jaxplace_cli.model.sizes import human_bytes, human_ns
from jaxplace_cli.report.distributed import render_job

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


_short = below


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
    _offload(console, s)
    _routes(console, s)

    if s.sites:
        st = Table(title="Top transfer sites (by bytes)", title_justify="left")
        # The site is what the user acts on: it keeps its width (up to 60 characters, then it
        # folds) and the descriptive columns wrap instead.
        widest = max(len(f"{_short(x.file)}:{x.line}") for x in s.sites)
        narrow = console.width < 110  # routes are also in "Transfers per route"
        st.add_column("site", min_width=min(widest, 60, max(16, console.width - 62)), overflow="fold")
        for col in ("kind", "count", "bytes", "how", "api") + (() if narrow else ("route",)):
            st.add_column(col, justify="right" if col in ("count", "bytes") else "left",
                          no_wrap=col in ("kind", "count", "bytes"),
                          max_width=10 if narrow and col == "how" else None,
                          overflow="fold" if col == "api" else "ellipsis")
        for site in s.sites:
            how = ("implicit" if site.implicit else "explicit") + (", blocking" if site.blocking else "")
            st.add_row(f"{_short(site.file)}:{site.line}", site.kind, f"{site.count:,}",
                       human_bytes(site.bytes), how, site.api,
                       *(() if narrow else (", ".join(site.routes),)))
        console.print(st)

    _ops_table(console, s, "Ops per device")

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

    if len(result.hosts) > 1:
        _hosts(console, result)
    render_job(console, result)  # a jax.distributed job: per process (report/distributed.py)

    if result.budget is not None:
        b = result.budget
        console.print(Text(f"Budget {'passed' if b.passed else 'FAILED'} ({b.source}, "
                           f"{len(b.limits)} limits)", style="bold green" if b.passed else "bold red"))
        for br in b.breaches:
            console.print(Text(f"    {br.message}", style="red"))

    if result.findings:
        console.print(Text(f"Findings ({len(result.findings)})", style="bold"))
        for f in result.findings:
            where = f"{_short(f.file)}:{f.line}" if f.file else ""
            console.print(Text.assemble((f"[{f.severity}] ", _SEVERITY_STYLE.get(f.severity, "")),
                                        (f"{f.rule} ", "bold"), (where, "underline")))
            console.print(Text(f"    {f.message}"))
            cost = _cost(f)
            if cost:
                console.print(Text(f"    cost: {cost}", style="dim"))
            for r in f.related[:8]:
                console.print(Text(f"    at {_short(r['file'])}:{r['line']}: {r['role']}", style="dim"))
            if len(f.related) > 8:
                console.print(Text(f"    ... and {len(f.related) - 8} more sites", style="dim"))
            if f.fix:
                console.print(Text(f"    fix: {f.fix}", style="green"))
    else:
        console.print(Text("No findings.", style="green"))
    _suggestion(console, result)


def suggest_command(path: str, sg) -> str:
    """The command that shows (and verifies) a suggestion: a device_put change is the
    script's to make, so that one shows the placement instead of writing a policy."""
    if sg.needs_code_change:
        return f"jaxplace suggest {path} --retarget-puts   (then change the device_put targets it names)"
    return f"jaxplace suggest {path} -o policy.toml --verify SCRIPT"


def _suggestion(console: Console, result: AuditResult) -> None:
    sg = result.suggestion
    if sg is not None:
        console.print(Text("Suggestion", style="bold"))
        console.print(Text(f"    {sg.summary}"))
        console.print(Text(f"    try: {suggest_command(result.path, sg)}", style="green"))


def _cost(f) -> str:
    parts = []
    if f.count:
        parts.append(f"{f.count:,}×")
    if f.bytes:
        parts.append(human_bytes(f.bytes))
    if f.time_ns:
        parts.append(human_ns(f.time_ns))
    if f.per_step:
        p = f.per_step
        parts.append(f"{p['median']:g}/step (min {p['min']}, max {p['max']}, {p['steps']} steps)")
    return " · ".join(parts)


def _ops_table(console: Console, s, title: str) -> None:
    device_time = any(d.device_ns is not None for d in s.ops_by_device)
    ot = Table(title=f"{title} ({s.ops_total:,} ops"
               + (f", {s.op_errors} failed" if s.op_errors else "") + ")", title_justify="left")
    ot.add_column("device")
    ot.add_column("ops", justify="right")
    ot.add_column("device time" if device_time else "dispatch time", justify="right")
    ot.add_column("most frequent")
    for d in s.ops_by_device:
        ns = d.device_ns if device_time else d.dispatch_ns
        ot.add_row(d.device, f"{d.count:,}", human_ns(ns or 0),
                   Text(", ".join(f"{n}×{c}" for n, c in d.top)))
    console.print(ot)


def _routes(console: Console, s) -> None:
    """Transfers per kind and device pair (only when there are several, or sizes are unknown)."""
    if not s.routes or (len(s.routes) < 2 and not any(r.unknown_size for r in s.routes)):
        return
    rt = Table(title="Transfers per route", title_justify="left")
    for col in ("kind", "route", "count", "bytes", "small (<min)", "size unknown", "blocking"):
        rt.add_column(col, justify="left" if col in ("kind", "route") else "right")
    for r in s.routes:
        rt.add_row(r.kind, f"{r.src} → {r.dst}", f"{r.count:,}", human_bytes(r.bytes),
                   f"{r.small_count:,} · {human_bytes(r.small_bytes)}", f"{r.unknown_size:,}",
                   f"{r.blocking:,}")
    console.print(rt)


def _offload(console: Console, s) -> None:
    n = sum(v.count for v in s.offload.values()) + sum(s.offload_unknown_size.values())
    if not n:
        return
    ot = Table(title="XLA host-offload copies (compiled into the program; apart from the above)",
               title_justify="left")
    for col in ("kind", "count", "bytes", "size unknown"):
        ot.add_column(col, justify="left" if col == "kind" else "right")
    for kind, tot in s.offload.items():
        if not tot.count and not s.offload_unknown_size.get(kind, 0) and kind == "d2d":
            continue  # offload is host memory <-> device; d2d only if a source ever reports it
        ot.add_row(kind, f"{tot.count:,}", f"{human_bytes(tot.bytes)} ({tot.bytes:,} B)",
                   f"{s.offload_unknown_size.get(kind, 0):,}")
    console.print(ot)


def _hosts(console: Console, result: AuditResult) -> None:
    ht = Table(title=f"Per host ({len(result.hosts)} hosts; the tables above are all hosts merged)",
               title_justify="left")
    for col in ("host", "devices", "h2d", "d2h", "d2d", "size unknown", "ops", "device time", "steps"):
        ht.add_column(col, justify="left" if col in ("host", "devices") else "right")
    for h in result.hosts:
        hs = h.summary
        cells = [f"{hs.totals[k].count + hs.small[k].count:,} · "
                 f"{human_bytes(hs.totals[k].bytes + hs.small[k].bytes)}" for k in ("h2d", "d2h", "d2d")]
        ns = sum(d.device_ns or 0 for d in hs.ops_by_device)
        ht.add_row(h.host, str(len(hs.devices)), *cells, f"{sum(hs.unknown_size.values()):,}",
                   f"{hs.ops_total:,}", human_ns(ns),
                   "" if h.step_count is None else str(h.step_count))
    console.print(ht)
