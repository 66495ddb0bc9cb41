"""jaxplace in IPython and Jupyter: ``%load_ext jaxplace_cli``, then

- ``%%jaxplace [jaxplace run options]``: record the cell with ``jaxplace run`` and show the
  HTML report inline;
- ``%jaxplace_audit RUN [jaxplace audit options]``: the audit as text (``--html``: the HTML
  report inline).

The cell runs in a fresh Python, as memray's ``%%memray_flamegraph`` does, not in the
notebook's own: ``--devices N`` must be set before JAX is imported (the notebook has usually
imported it), and recording must not leave hooks in the notebook's process. So the cell sees
none of the notebook's variables; it is kept as ``jaxplace-runs/cells/cell-<time>.py`` so
the report can show its lines. Its output streams into the cell's output as it comes.
"""
from __future__ import annotations

import html
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

CELLS = Path("jaxplace-runs") / "cells"
IFRAME_HEIGHT = 900


def load(ip) -> None:
    ip.register_magic_function(jaxplace_cell, magic_kind="cell", magic_name="jaxplace")
    ip.register_magic_function(jaxplace_audit, magic_kind="line", magic_name="jaxplace_audit")


def _display_report(run_dir: Path) -> Path | None:
    """Write ``<run>.html`` and show it in an iframe (``srcdoc``, sandboxed: its script runs in
    an origin of its own, away from the notebook's page)."""
    from IPython.display import HTML, display

    from jaxplace_cli.analysis.audit import Audit
    from jaxplace_cli.model.errors import JaxplaceError
    from jaxplace_cli.report import write_atomic
    from jaxplace_cli.report.base import Options, renderer
    from jaxplace_cli.suggest.top import attach_suggestion

    out = run_dir.with_name(run_dir.name + ".html")
    try:
        audit = Audit(run_dir, suggest=attach_suggestion)
        page = renderer("audit", "html").render(audit.result(), Options(timeline=audit.timeline(),
                                                                        sources=audit.sources()))
        write_atomic(out, page)
    except (JaxplaceError, OSError) as exc:
        print(f"jaxplace: error: no report for {run_dir}: {exc}", file=sys.stderr)
        return None
    display(HTML(f'<div class="jaxplace"><iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
                 f'style="width:100%;height:{IFRAME_HEIGHT}px;border:1px solid #d9dde4"></iframe></div>'))
    return out


def _pump(proc: subprocess.Popen) -> int:
    """Copy the child's stdout/stderr to ours as they come (from this thread: a notebook routes
    output from the running cell's thread), until it exits; Ctrl-C is passed on to it."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, sys.stdout)
    sel.register(proc.stderr, selectors.EVENT_READ, sys.stderr)
    try:
        while sel.get_map():
            for key, _ in sel.select():
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.write(chunk.decode("utf-8", "replace"))
                key.data.flush()
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(2)  # SIGINT: the run saves what it recorded
        proc.wait()
        raise


def jaxplace_cell(line: str, cell: str):
    """%%jaxplace [jaxplace run options]: record this cell (in a fresh Python) and show the report.

    Options are those of ``jaxplace run`` (``--devices 2``, ``--policy rr``, ``--out DIR``, ...)."""
    args = shlex.split(line)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    CELLS.mkdir(parents=True, exist_ok=True)
    script = CELLS / f"cell-{stamp}-{os.getpid()}-{time.monotonic_ns() % 10**6}.py"
    script.write_text(cell)
    if "--out" in args:
        run_dir = Path(args[args.index("--out") + 1])
    else:
        run_dir = CELLS.parent / script.stem
        args += ["--out", str(run_dir)]
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "run", *args, str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    code = _pump(proc)
    if not (run_dir / "run.json").is_file():
        print(f"jaxplace: no run was recorded (exit {code})", file=sys.stderr)
        return None
    _display_report(run_dir)
    if code:
        print(f"jaxplace: the cell exited with {code}", file=sys.stderr)
    return None


def jaxplace_audit(line: str):
    """%jaxplace_audit RUN [jaxplace audit options]: print the audit (``--html``: show the
    HTML report inline instead)."""
    args = shlex.split(line)
    if "--html" in args:
        args.remove("--html")
        if len(args) != 1:
            print("jaxplace: error: %jaxplace_audit RUN --html takes the run only", file=sys.stderr)
            return None
        _display_report(Path(args[0]))
        return None
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "audit", "--format", "text", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _pump(proc)
    return None
