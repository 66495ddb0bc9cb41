"""Which ``.xplane.pb`` files a path designates: a file, a dir of them, or a log dir with
``plugins/profile/<run>/`` (the newest run unless one is named)."""
from __future__ import annotations

from pathlib import Path

from jaxplace_cli.sources.xplane.common import HINT, TRACE_SUFFIX, TraceError


def _traces_in(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*" + TRACE_SUFFIX) if p.is_file())


def _runs(path: Path) -> tuple[Path | None, dict[str, list[Path]]]:
    """Run dirs (``<run>/*.xplane.pb``) under the first of ``path/plugins/profile``,
    ``path/profile`` and ``path`` that has any."""
    for base in (path / "plugins" / "profile", path / "profile", path):
        if not base.is_dir():
            continue
        runs = {}
        for sub in base.iterdir():
            if sub.is_dir():
                files = _traces_in(sub)
                if files:
                    runs[sub.name] = files
        if runs:
            return base, runs
    return None, {}


def list_runs(path) -> list[str]:
    """Names of the profiling runs under a log dir, oldest first (JAX names them by time,
    ``YYYY_MM_DD_HH_MM_SS``). Empty for a single file or a dir of bare ``.xplane.pb`` files."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"no such file or directory: {p}; {HINT}")
    if p.is_file():
        return []
    return sorted(_runs(p)[1])


def find_trace_files(path, run: str | None = None) -> list[Path]:
    """The ``.xplane.pb`` files (one per host) that ``path`` designates.

    ``path`` may be a ``.xplane.pb`` file, a dir holding ``.xplane.pb`` files directly, or a log
    dir (a jaxplace run dir or a ``jax.profiler.trace`` dir) with ``plugins/profile/<run>/``.
    A log dir may hold several runs: the newest (greatest name) is chosen unless ``run`` names
    one, since re-profiling into the same dir is common and the latest capture is what the user
    just made.
    """
    return _designated(Path(path), run)


def _designated(p: Path, run: str | None) -> list[Path]:
    if not p.exists():
        raise TraceError(f"no such file or directory: {p}; {HINT}")
    if p.is_file():
        if run is not None:
            raise TraceError(f"run {run!r} was given but {p} is a single file; "
                             "pass the log dir that holds plugins/profile/ to choose a run")
        return [p]
    if not p.is_dir():
        raise TraceError(f"{p} is neither a file nor a directory; {HINT}")
    direct = _traces_in(p)
    if direct and run is None:
        return direct
    base, runs = _runs(p)
    if not runs:
        if run is not None:
            raise TraceError(f"no profiling runs under {p} (expected plugins/profile/<run>/"
                             f"<host>{TRACE_SUFFIX}), so run {run!r} cannot be chosen")
        raise TraceError(f"no {TRACE_SUFFIX} trace found in {p}; expected "
                         f"plugins/profile/<run>/<host>{TRACE_SUFFIX} or {TRACE_SUFFIX} files "
                         "in it (was the script run under jax.profiler.trace?)")
    if run is None:
        return runs[max(runs)]
    if run not in runs:
        raise TraceError(f"no run {run!r} in {base}; available runs: {', '.join(sorted(runs))}")
    return runs[run]
