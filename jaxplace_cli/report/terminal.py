"""The terminal report (rich on a TTY, the same layout as plain text otherwise).

Order (issue 14): what a reader needs first comes first.
1. the verdict line — budget passed/FAILED, findings by severity, the biggest transfer cost;
2. what was audited (script, status, devices, notes) and the budget's breaches;
3. findings grouped by rule, worst first, each rule's top sites (``--max-findings``, default
   3, then "and N more"); the suggestion;
4. the tables (transfers, routes, top sites, ops per device, steps, hosts).
``--verbose`` lists every finding and every related site.

Width comes from the console (the terminal, or ``COLUMNS``, see report/__init__.py). Wrapped
lines keep their indent (``Padding``), and a site is never split: a table's site column is as
wide as its longest site, which is shortened to its file name when the full path does not fit.
"""
from __future__ import annotations

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.summary import kind_all, listed_sites
from jaxplace_cli.model import safe
from jaxplace_cli.model.paths import below, file_name
from jaxplace_cli.model.sizes import human_bytes, human_ns, plural
from jaxplace_cli.report.distributed import render_job
from jaxplace_cli.report.verdict import by_rule, cost_text, severity_counts, verdict_parts

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
DEFAULT_MAX_FINDINGS = 3  # sites shown per rule unless --max-findings / --verbose
RELATED_SHOWN = 4


def site_text(file: str, line: int | None, room: int = 10_000) -> str:
    """``dir/train.py:12`` (below the working directory), or ``train.py:12`` when that does
    not fit in ``room`` columns: a site is shortened, never split."""
    file = safe.plain(file)
    full = f"{below(file)}:{line}" if line is not None else below(file)
    if len(full) <= room:
        return full
    return f"{file_name(file)}:{line}" if line is not None else file_name(file)


def _indented(renderable, indent: int) -> Padding:
    return Padding(renderable, (0, 0, 0, indent))


def render(result: AuditResult, console: Console, max_findings: int = DEFAULT_MAX_FINDINGS,
           verbose: bool = False) -> None:
    style = "bold red" if (result.budget and not result.budget.passed) or any(
        f.severity == "error" for f in result.findings) else "bold"
    console.print(Text(" · ".join(verdict_parts(result)), style=style))
    _header(result, console)
    _budget(result, console)
    _findings(result, console, None if verbose else max_findings, verbose)
    _suggestion(console, result)
    _tables(result, console, verbose)
    _see_it(result, console)


def _see_it(result: AuditResult, console: Console) -> None:
    """How to open the picture of a run (and its profiler window, when it has one)."""
    if result.source != "run":
        return
    where = safe.plain(result.path)
    trace = getattr(result.manifest, "trace", None)
    window = trace is not None and bool(trace.files)
    steps = getattr(trace, "steps", None) if window else None
    steps = steps if isinstance(steps, list) and len(steps) == 2 else None  # a hand-edited run.json
    covers = (f", steps {steps[0]}-{steps[1]}" if steps[0] != steps[1] else f", step {steps[0]}") if steps else ""
    console.print(Text(f"see it: jaxplace report {where} -o report.html"
                       + (f"   (its jax.profiler window{covers}: jaxplace view {where})" if window else ""),
                       style="dim"))


def _header(result: AuditResult, console: Console) -> None:
    s, m = result.summary, result.manifest
    console.print(Text(f"jaxplace audit · {safe.plain(result.path)}", style="bold"))
    if result.source == "run":
        argv = safe.plain(" ".join(str(a) for a in m.argv))
        console.print(Text(f"script: {argv}   status: {status_text(m)}   policy: {safe.plain(m.policy)}   "
                           f"jax {safe.plain(m.jax_version or '?')}"))
    console.print(Text(f"devices: {safe.plain(', '.join(s.devices)) or 'none recorded'}"))
    for note in result.notes:
        console.print(_indented(Text(f"note: {safe.plain(note)}", style="dim"), 0))


def status_text(m) -> str:
    """``complete (exit 0)``; a run whose process died before jaxplace saved it (SIGKILL, the
    OOM killer) has no exit code to show: ``killed before it finished (no exit code)``."""
    if m.status == "running" and m.exit_code is None:
        return "killed before it finished (no exit code)"
    return f"{safe.plain(m.status)} (exit {safe.plain(m.exit_code)})"


def _budget(result: AuditResult, console: Console) -> None:
    b = result.budget
    if b is None:
        return
    console.print(Text(f"Budget {'passed' if b.passed else 'FAILED'} ({safe.plain(b.source)}, "
                       f"{len(b.limits)} limits)", style="bold green" if b.passed else "bold red"))
    for br in b.breaches:
        console.print(_indented(Text(safe.plain(br.message), style="red"), 4))


def _findings(result: AuditResult, console: Console, cap: int | None, verbose: bool) -> None:
    if not result.findings:
        console.print(Text("No findings.", style="green"))
        return
    console.print(Text(f"Findings ({len(result.findings)}: {severity_counts(result.findings)})", style="bold"))
    room = console.width - 4
    for rule, group in by_rule(result.findings):
        worst = group[0].severity
        sites = len(group)
        console.print(Text.assemble((f"{worst} ", _SEVERITY_STYLE.get(worst, "")), (rule, "bold"),
                                    f" · {sites} site{'s' if sites != 1 else ''}"))
        shown = group if cap is None else group[:cap]
        same_fix = len({f.fix for f in shown}) == 1
        for f in shown:
            _finding(console, f, room, verbose, show_fix=not same_fix)
        if same_fix and shown[0].fix:
            console.print(_indented(Text(f"fix: {safe.plain(shown[0].fix)}", style="green"), 2))
        if len(group) > len(shown):
            console.print(_indented(Text(f"... and {len(group) - len(shown)} more {rule} findings "
                                         f"(--max-findings {len(group)} or --verbose lists them)",
                                         style="dim"), 2))


def _finding(console: Console, f, room: int, verbose: bool, show_fix: bool) -> None:
    where = site_text(f.file, f.line, room) if f.file else "(whole program)"
    console.print(_indented(Text(where, style="underline" if f.file else "dim"), 2))
    lines = [Text(safe.plain(f.message))]
    cost = cost_text(f)
    if cost:
        lines.append(Text(f"cost: {cost}", style="dim"))
    related = f.related if verbose else f.related[:RELATED_SHOWN]
    for r in related:
        lines.append(Text(f"at {site_text(r['file'], r['line'], room - 6)}: {safe.plain(r['role'])}",
                          style="dim"))
    if len(f.related) > len(related):
        lines.append(Text(f"... and {len(f.related) - len(related)} more sites (--verbose)", style="dim"))
    if show_fix and f.fix:
        lines.append(Text(f"fix: {safe.plain(f.fix)}", style="green"))
    console.print(_indented(Group(*lines), 6))


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
        console.print(_indented(Text(safe.plain(sg.summary)), 2))
        command, _, then = safe.plain(suggest_command(result.path, sg)).partition("   ")
        # a command is never wrapped: it is copied and pasted (on a line of its own when the
        # line would be too long; a path longer than the terminal still passes the width)
        line = f"  try: {command}"
        if len(line) > console.width:
            console.print(Text("  try:", style="green"))
            line = f"    {command}"
        console.print(Text(line, style="green"), soft_wrap=True)
        if then:
            console.print(_indented(Text(then.strip().strip("()"), style="green"), 7))


# -- the tables ----------------------------------------------------------------------------------

def _table(title: str) -> Table:
    return Table(title=title, title_justify="left")


def _tables(result: AuditResult, console: Console, verbose: bool) -> None:
    s = result.summary
    t = _table(f"Transfers (small: under {human_bytes(s.min_bytes)} each)")
    for col in ("kind", "count", "bytes", "of them small", "size unknown"):
        t.add_column(col, justify="left" if col == "kind" else "right", overflow="fold")
    for kind in s.totals:
        sm, both = s.small[kind], kind_all(s, kind)
        t.add_row(safe.plain(kind), f"{both.count:,}", f"{human_bytes(both.bytes)} ({both.bytes:,} B)",
                  f"{sm.count:,} · {human_bytes(sm.bytes)}", f"{s.unknown_size.get(kind, 0):,}")
    console.print(t)
    _offload(console, s)
    _routes(console, s)
    if s.sites or s.small_sites:
        _sites(console, s)
    _ops_table(console, s, "Ops per device")
    _steps(console, result)
    _memory(console, result)
    if len(result.hosts) > 1:
        _hosts(console, result)
    render_job(console, result)  # a jax.distributed job: per process (report/distributed.py)


def _sites(console: Console, s) -> None:
    """Top transfer sites. The site column is as wide as its longest entry and never wraps;
    paths that would not leave room for the other columns are shown as file names."""
    narrow = console.width < 110  # routes are also in "Transfers per route"
    room = max(console.width - (46 if narrow else 60), 16)
    listed = listed_sites(s)
    names = [site_text(x.file, x.line, room) for x in listed]
    st = _table(f"Top transfer sites (by bytes; small: under {human_bytes(s.min_bytes)} each)")
    st.add_column("site", no_wrap=True, min_width=max(len(n) for n in names))
    for col in ("kind", "count", "bytes", "how", "api") + (() if narrow else ("route",)):
        st.add_column(col, justify="right" if col in ("count", "bytes") else "left",
                      no_wrap=col in ("kind", "count", "bytes"), overflow="fold")
    for name, site in zip(names, listed):
        how = ("implicit" if site.implicit else "explicit") + (", blocking" if site.blocking else "")
        count = f"{site.all_count:,}" + (f" ({'all' if not site.count else f'{site.small_count:,}'} small)"
                                         if site.small_count else "")
        st.add_row(name, safe.plain(site.kind), count, human_bytes(site.all_bytes), how, safe.plain(site.api),
                   *(() if narrow else (safe.plain(", ".join(site.routes)),)))
    console.print(st)


def _steps(console: Console, result: AuditResult) -> None:
    info = result.steps
    if info is not None and info.steps:
        stt = _table(f"Per step, steady state ({len(info.steps)} steps by {safe.plain(info.method)}: "
                     f"{safe.plain(info.detail)}; first {info.warmup} excluded as warm-up)")
        for col in ("kind", "count min/median/max", "bytes min/median/max"):
            stt.add_column(col, overflow="fold")
        for kind, st in result.step_transfers.items():
            d = st.summary(info.warmup)
            stt.add_row(safe.plain(kind), f"{d['min']}/{d['median']:g}/{d['max']}",
                        f"{human_bytes(d['bytes_min'])}/{human_bytes(int(d['bytes_median']))}/"
                        f"{human_bytes(d['bytes_max'])}")
        console.print(stt)
    elif info is not None:
        console.print(Text(f"steps: none detected ({safe.plain(info.detail)})", style="dim"))


def _memory(console: Console, result: AuditResult) -> None:
    """Device memory (issue 27): each device's peak of live jax.Arrays, when, what is left at
    exit, and the lines holding most at the peak; allocations that failed."""
    mem = result.memory
    if mem is None or not (mem.devices or mem.failed_allocations):
        return
    stats = mem.source != "tracked"
    mt = _table("Device memory (live jax.Arrays by line; XLA temporaries not counted)")
    for col in ("device", "peak", "at", "at exit") + (("memory_stats peak",) if stats else ()) + ("held at the peak",):
        mt.add_column(col, justify="right" if col in ("peak", "at exit", "memory_stats peak") else "left",
                      overflow="fold")
    room = max(console.width - 60, 16)
    for d in mem.devices:
        when = f"step {d.peak_step}" if d.peak_step is not None else f"seq {d.peak_seq}"
        top = ", ".join(f"{site_text(h.file, h.line, room)} {human_bytes(h.bytes)}"
                        + (f" ({h.arrays} arrays)" if h.arrays > 1 else "") for h in d.at_peak[:3])
        extra = (human_bytes(d.stats[1]) if d.stats else "-",) if stats else ()
        device = d.device if d.process is None else f"p{d.process} {d.device}"  # a job: whose device
        mt.add_row(safe.plain(device), human_bytes(d.peak_bytes), when, human_bytes(d.end_bytes), *extra,
                   Text(safe.plain(top)))
    if mem.devices:
        console.print(mt)
    for f in mem.failed_allocations:
        asked = human_bytes(f.bytes) if f.bytes >= 0 else "an unknown size"
        console.print(Text(safe.plain(f"out of memory at {site_text(f.file, f.line)} on {f.device}: "
                                      f"requested {asked}"), style="red"))


def _ops_table(console: Console, s, title: str) -> None:
    device_time = any(d.device_ns is not None for d in s.ops_by_device)
    ot = _table(f"{title} ({plural(s.ops_total, 'op')}" + (f", {s.op_errors} failed" if s.op_errors else "") + ")")
    ot.add_column("device", overflow="fold")
    ot.add_column("ops", justify="right")
    ot.add_column("device time" if device_time else "dispatch time", justify="right")
    ot.add_column("most frequent", overflow="fold")
    for d in s.ops_by_device:
        ns = d.device_ns if device_time else d.dispatch_ns
        ot.add_row(safe.plain(d.device), f"{d.count:,}", human_ns(ns or 0),
                   Text(safe.plain(", ".join(f"{n}×{c}" for n, c in d.top))))
    console.print(ot)


def _routes(console: Console, s) -> None:
    """Transfers per kind and device pair (only when there are several, or sizes are unknown)."""
    if not s.routes or (len(s.routes) < 2 and not any(r.unknown_size for r in s.routes)):
        return
    rt = _table("Transfers per route")
    for col in ("kind", "route", "count", "bytes", "of them small", "size unknown", "blocking"):
        rt.add_column(col, justify="left" if col in ("kind", "route") else "right", overflow="fold",
                      no_wrap=col != "size unknown")
    for r in s.routes:
        rt.add_row(safe.plain(r.kind), safe.plain(f"{r.src} → {r.dst}"), f"{r.count + r.small_count:,}",
                   human_bytes(r.bytes + r.small_bytes),
                   f"{r.small_count:,} · {human_bytes(r.small_bytes)}", f"{r.unknown_size:,}",
                   f"{r.blocking:,}")
    console.print(rt)


def _offload(console: Console, s) -> None:
    n = sum(v.count for v in s.offload.values()) + sum(s.offload_unknown_size.values())
    if not n:
        return
    ot = _table("XLA host-offload copies (compiled into the program; apart from the above)")
    for col in ("kind", "count", "bytes", "size unknown"):
        ot.add_column(col, justify="left" if col == "kind" else "right", overflow="fold")
    for kind, tot in s.offload.items():
        if not tot.count and not s.offload_unknown_size.get(kind, 0) and kind == "d2d":
            continue  # offload is host memory <-> device; d2d only if a source ever reports it
        ot.add_row(safe.plain(kind), f"{tot.count:,}", f"{human_bytes(tot.bytes)} ({tot.bytes:,} B)",
                   f"{s.offload_unknown_size.get(kind, 0):,}")
    console.print(ot)


def _hosts(console: Console, result: AuditResult) -> None:
    ht = _table(f"Per host ({len(result.hosts)} hosts; the tables above are all hosts merged)")
    for col in ("host", "devices", "h2d", "d2h", "d2d", "size unknown", "ops", "device time", "steps"):
        ht.add_column(col, justify="left" if col in ("host", "devices") else "right", overflow="fold")
    for h in result.hosts:
        hs = h.summary
        cells = [f"{hs.totals[k].count + hs.small[k].count:,} · "
                 f"{human_bytes(hs.totals[k].bytes + hs.small[k].bytes)}" for k in ("h2d", "d2h", "d2d")]
        ns = sum(d.device_ns or 0 for d in hs.ops_by_device)
        ht.add_row(safe.plain(h.host), str(len(hs.devices)), *cells, f"{sum(hs.unknown_size.values()):,}",
                   f"{hs.ops_total:,}", human_ns(ns),
                   "" if h.step_count is None else str(h.step_count))
    console.print(ht)


def render_rich(result: AuditResult, options) -> str:
    """The rich report (a terminal's colours and styles) as text: the registry's ``rich``."""
    return _to_text(result, options, rich=True)


def render_text(result: AuditResult, options) -> str:
    """The same layout, plain: no colour, no trailing blanks (a pipe, a file, a CI log)."""
    return _to_text(result, options, rich=False)


def _to_text(result: AuditResult, options, rich: bool) -> str:
    import io

    from jaxplace_cli.report import text_width

    cap = DEFAULT_MAX_FINDINGS if options.max_findings is None else options.max_findings
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=rich, no_color=not rich, width=options.width or text_width(),
                      highlight=False, soft_wrap=False, emoji=False, markup=False)
    render(result, console, max_findings=cap, verbose=options.verbose)
    text = buf.getvalue()
    # rich pads indented blocks to the full width; a text report keeps no trailing blanks
    return text if rich else "\n".join(line.rstrip() for line in text.split("\n"))


# -- bytes by call stack (`jaxplace audit RUN --stacks`, issue 28) -----------------------------

def frame_name(f) -> str:
    """``layers.py:7 attn`` (file name, line, function) of a stack frame; a folded box's name."""
    if not f.real:
        return f.function
    return f"{file_name(f.file)}:{f.line} {f.function}"


def render_stacks(tree, label: str = "") -> str:
    """The call-stack tree (``analysis.stacks.StackTree``) as indented plain lines: each frame
    with the bytes and count of every transfer at or below it, then per kind. ``label``: the
    process of a job (``p0``)."""
    total = sum(tree.bytes.values())
    where = f" of process {label}" if label else ""
    lines = [f"Bytes by call stack{where} (transfers at or below each frame: {human_bytes(total)}, "
             f"{sum(tree.count.values()):,} transfers)"]
    if not tree.roots:
        lines.append("  no transfers")
    for depth, f in tree.walk():
        kinds = " · ".join(f"{k} {f.bytes[k]:,} B" for k in sorted(f.bytes))
        lines.append(f"{'  ' * (depth + 1)}{safe.plain(frame_name(f))}  {f.total:,} B  "
                     f"{f.total_count:,}×  ({kinds})")
    if tree.folded:
        lines.append(f"  {tree.folded:,} smaller frames folded into the '(N more)' lines")
    return "\n".join(lines) + "\n"
