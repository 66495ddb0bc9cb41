"""Which ``.xplane.pb`` files a path designates, and how much of them jaxplace agrees to read.

Everything here runs before a byte of a trace is parsed, so its limits hold for any input:

* one trace file: at most :data:`MAX_TRACE_BYTES` (1 GiB; ``JAXPLACE_MAX_TRACE_BYTES`` raises or
  lowers it, never above :data:`PARSER_LIMIT`). ``ProfileData.from_file`` (protobuf underneath)
  segfaults on a file of 2 GiB or more (exit 139, no message) and reads all of a 2 GiB - 1 file
  (2.2 GB of memory) before failing, so the size is checked with ``stat`` first;
* all the files of one log dir together: at most :data:`MAX_TRACE_DIR_BYTES` (4 GiB;
  ``JAXPLACE_MAX_TRACE_DIR_BYTES``), since every host's file is parsed in turn;
* a directory walk looking for traces: at most :data:`MAX_WALK_DEPTH` (64) levels down. A log
  dir holds its traces 3 levels down (``plugins/profile/<run>/``); ``Path.rglob`` recursed once
  per level and raised RecursionError on a tree 1,200 levels deep ("internal error", exit 3).

Each breach is one :class:`TraceError` line (exit 2) naming the path, its size and the limit.
"""
from __future__ import annotations

import os
from pathlib import Path

from jaxplace_cli.model.sizes import human_bytes, parse_size, plural
from jaxplace_cli.sources.xplane.common import HINT, TRACE_SUFFIX, TraceError

PARSER_LIMIT = 2**31 - 1  # the largest file ProfileData.from_file can take (protobuf's int limit)
MAX_TRACE_BYTES = 2**30  # 1 GiB: well below PARSER_LIMIT
MAX_TRACE_DIR_BYTES = 4 * 2**30  # 4 GiB for all the host files of one profiling run
MAX_WALK_DEPTH = 64
ENV_MAX_TRACE = "JAXPLACE_MAX_TRACE_BYTES"
ENV_MAX_DIR = "JAXPLACE_MAX_TRACE_DIR_BYTES"


def _limit(var: str, default: int, ceiling: int | None = None) -> int:
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return default
    try:
        n = parse_size(raw)
    except ValueError as e:
        raise TraceError(f"{var}={raw[:40]!r}: {e}") from None
    if ceiling is not None and n > ceiling:
        raise TraceError(f"{var}={raw[:40]!r} is above {ceiling:,} bytes, the largest trace file "
                         "ProfileData can parse (it crashes on 2 GiB or more)")
    return n


def max_trace_bytes() -> int:
    """The size limit of one trace file now (the default or ``JAXPLACE_MAX_TRACE_BYTES``)."""
    return _limit(ENV_MAX_TRACE, MAX_TRACE_BYTES, PARSER_LIMIT)


def max_trace_dir_bytes() -> int:
    """The limit of a log dir's trace files together (``JAXPLACE_MAX_TRACE_DIR_BYTES``)."""
    return _limit(ENV_MAX_DIR, MAX_TRACE_DIR_BYTES)


def _sized(n: int) -> str:
    return f"{human_bytes(n)} ({n:,} bytes)"


def check_size(path: Path, size: int) -> None:
    """Refuse a trace file over the limit, before anything reads or parses it."""
    limit = max_trace_bytes()
    if size > limit:
        raise TraceError(f"{path} is {_sized(size)}, over the {_sized(limit)} limit for one trace "
                         f"file; not read (set {ENV_MAX_TRACE} to change the limit, at most "
                         f"{PARSER_LIMIT:,} bytes, the most ProfileData can parse)")


def check_sizes(files: list[Path]) -> None:
    """Each file, then all together, within the limits (``stat`` only). A file that cannot be
    stat'ed is left to the reader, which says why it cannot be read."""
    total = 0
    for f in files:
        try:
            size = f.stat().st_size
        except OSError:
            continue
        check_size(f, size)
        total += size
    limit = max_trace_dir_bytes()
    if total > limit:
        are = "are" if len(files) > 1 else "is"
        raise TraceError(f"the {plural(len(files), 'trace file')} of {files[0].parent} {are} "
                         f"{_sized(total)} together, over the {_sized(limit)} limit for one "
                         f"profiling run; not read (set {ENV_MAX_DIR} to change it)")


def holds_trace(path, max_depth: int = MAX_WALK_DEPTH) -> bool:
    """Whether a ``*.xplane.pb`` file lies anywhere under the directory ``path``.

    Breadth first, level by level, with no recursion and without following symlinked
    directories (no loops); unreadable subdirectories are skipped. A tree that goes on below
    ``max_depth`` levels without a trace above is a :class:`TraceError`, not a longer walk."""
    level = [os.fspath(path)]
    for _depth in range(max_depth + 1):
        below = []
        for d in level:
            try:
                with os.scandir(d) as entries:
                    for e in entries:
                        if e.name.endswith(TRACE_SUFFIX) and _is_file(e):
                            return True
                        if _is_real_dir(e):
                            below.append(e.path)
            except OSError:
                continue
        if not below:
            return False
        level = below
    raise TraceError(f"{path} goes on more than {max_depth} directory levels down without a "
                     f"{TRACE_SUFFIX} trace above that depth; jaxplace looks no deeper. Pass the "
                     "log dir that holds plugins/profile/, or the .xplane.pb file itself")


def _is_file(e: os.DirEntry) -> bool:
    try:
        return e.is_file()
    except OSError:
        return False


def _is_real_dir(e: os.DirEntry) -> bool:
    try:
        return e.is_dir(follow_symlinks=False)
    except OSError:
        return False


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
    """The ``.xplane.pb`` files (one per host) that ``path`` designates, within the size limits.

    ``path`` may be a ``.xplane.pb`` file, a dir holding ``.xplane.pb`` files directly, or a log
    dir (a jaxplace run dir or a ``jax.profiler.trace`` dir) with ``plugins/profile/<run>/``.
    A log dir may hold several runs: the newest (greatest name) is chosen unless ``run`` names
    one, since re-profiling into the same dir is common and the latest capture is what the user
    just made.
    """
    files = _designated(Path(path), run)
    check_sizes(files)
    return files


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
