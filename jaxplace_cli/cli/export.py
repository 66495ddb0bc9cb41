"""`jaxplace export`: the run in another tool's format (today: Perfetto / chrome://tracing)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from jaxplace_cli.cli.common import fail


def export(
    path: Path = typer.Argument(..., help="A jaxplace run directory."),
    perfetto: Optional[Path] = typer.Option(None, "--perfetto",
                                            help="Write Chrome trace event JSON here (gzipped when it ends in .gz)."),
    min_bytes: str = typer.Option("1KiB", "--min-bytes", help="Transfers smaller than this are not findings' moments."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
) -> None:
    """Export every op and transfer of a run for Perfetto / chrome://tracing.

    Chrome trace event JSON: a process per device plus the host, ops as slices, transfers as
    flow arrows between the processes, findings as instant events, steps as slices.

    Example: jaxplace export RUN --perfetto run.json.gz   (then open it at ui.perfetto.dev)
    """
    if perfetto is None:
        fail("say what to export: --perfetto OUT.json[.gz]")
    n = export_perfetto(path, perfetto, min_bytes)
    if not quiet:
        print(f"jaxplace: {n:,} trace events written to {perfetto}; open it at ui.perfetto.dev "
              "or chrome://tracing", file=sys.stderr)


def export_perfetto(path: Path, out: Path, min_bytes: str = "1KiB") -> int:
    """Write ``path``'s trace to ``out`` via a temporary file and a rename; returns the event count."""
    import gzip
    import io
    import os
    import sqlite3
    import tempfile

    from jaxplace_cli.analysis import audit_run
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.run import InputError, analyse, classify_input, open_run
    from jaxplace_cli.analysis.timeline import build_timeline
    from jaxplace_cli.model.sizes import parse_size
    from jaxplace_cli.report.perfetto import write
    from jaxplace_cli.store import StoreError

    try:
        cfg = RuleConfig(min_bytes=parse_size(min_bytes))
    except ValueError as exc:
        fail(f"--min-bytes: {exc}")
    try:
        if classify_input(path) != "run":
            fail(f"{path} is a jax.profiler trace: open it as it is (jaxplace view, or ui.perfetto.dev); "
                 "export reads jaxplace runs")
        run = open_run(path)
        result = analyse(run, lambda: audit_run(run, cfg))
        tl = analyse(run, lambda: build_timeline(run, result, detail_max=float("inf")))
    except InputError as exc:
        fail(str(exc))
    except (sqlite3.DatabaseError, StoreError) as exc:
        fail(f"{path}: the events store is corrupt or unreadable ({exc}); nothing exported")
    out = Path(out)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=str(out.parent or "."))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    try:
        with os.fdopen(fd, "wb") as raw:
            packed = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) if out.name.endswith(".gz") else None
            fh = io.TextIOWrapper(packed or raw, encoding="ascii", newline="\n")
            n = write(result, tl, fh)
            fh.flush()
            fh.detach()
            if packed is not None:
                packed.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; an export follows the umask
        os.replace(tmp, out)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            fail(f"cannot write {out}: {exc.strerror or exc}")
        raise
    return n
