"""`jaxplace export`: the run in another tool's format (today: Perfetto / chrome://tracing)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from jaxplace_cli.model.errors import UsageError


def export(
    path: Path = typer.Argument(..., metavar="PATH", help="A jaxplace run directory or launch job directory."),
    perfetto: Optional[Path] = typer.Option(None, "--perfetto", metavar="FILE",
                                            help="Write Chrome trace event JSON here (gzipped when it ends in .gz)."),
    speedscope: Optional[Path] = typer.Option(None, "--speedscope", metavar="FILE",
                                              help="Write the bytes transferred by call stack as a speedscope "
                                                   "JSON file (open it at speedscope.app)."),
    min_bytes: str = typer.Option("1KiB", "--min-bytes", metavar="SIZE",
                                  help="Transfers smaller than this are not findings' moments."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
) -> None:
    """Export every op and transfer of a run for Perfetto / chrome://tracing.

    Chrome trace event JSON: a process per device plus the host, ops as slices, transfers as
    flow arrows between the processes, findings as instant events, steps as slices. A launch
    job: every process's run in one trace (its lanes named p<i> ...).

    Example: jaxplace export RUN --perfetto run.json.gz   (then open it at ui.perfetto.dev)
    """
    if perfetto is None and speedscope is None:
        raise UsageError("say what to export: --perfetto OUT.json[.gz] or --speedscope OUT.json")
    if speedscope is not None:
        n = export_speedscope(path, speedscope)
        if not quiet:
            print(f"jaxplace: {n:,} call-stack frames written to {speedscope}; open it at speedscope.app",
                  file=sys.stderr)
    if perfetto is None:
        return
    n = export_perfetto(path, perfetto, min_bytes)
    if not quiet:
        print(f"jaxplace: {n:,} trace events written to {perfetto}; open it at ui.perfetto.dev "
              "or chrome://tracing", file=sys.stderr)


def export_speedscope(path: Path, out: Path) -> int:
    """Write ``path``'s bytes by call stack (a run's, or each process's of a job) to ``out``,
    atomically; returns the frames."""
    from jaxplace_cli import __version__
    from jaxplace_cli.analysis.audit import Audit
    from jaxplace_cli.report import write_atomic
    from jaxplace_cli.report.speedscope import render_speedscope

    audit = Audit(path)
    trees = audit.stacks_by_process()
    if not trees:
        raise UsageError(f"{path} is a {audit.kind}: --speedscope reads a jaxplace run or job")
    write_atomic(Path(out), render_speedscope(trees, Path(path).name, f"jaxplace {__version__}"))
    return sum(t.frames for _, t in trees)


def export_perfetto(path: Path, out: Path, min_bytes: str = "1KiB") -> int:
    """Write ``path``'s trace to ``out`` via a temporary file and a rename; returns the event count."""
    import gzip
    import io
    import os
    import tempfile

    from jaxplace_cli.analysis.audit import TRACE, Audit
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.cli.common import parse_min_bytes
    from jaxplace_cli.report.perfetto import write

    audit = Audit(path, RuleConfig(min_bytes=parse_min_bytes(min_bytes)))
    if audit.kind == TRACE:
        raise UsageError(f"{path} is a jax.profiler trace: open it as it is (jaxplace view, or "
                         "ui.perfetto.dev); export reads jaxplace runs")
    parts = audit.timelines(detail_max=float("inf"))
    out = Path(out)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=str(out.parent or "."))
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as raw:
            packed = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) if out.name.endswith(".gz") else None
            fh = io.TextIOWrapper(packed or raw, encoding="ascii", newline="\n")
            n = write(str(path), parts, fh)
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
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
        raise
    return n
