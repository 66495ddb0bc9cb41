"""How a source path is shown: one place, so every report names a file the same way."""
from __future__ import annotations

import os


def file_name(path: str) -> str:
    """``train.py`` for ``/work/train.py`` (or ``C:\\work\\train.py`` from a foreign trace)."""
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def site_name(path: str, line: int | None = None) -> str:
    """``train.py:12``: what findings and budget sentences say (the full path is kept apart)."""
    return f"{file_name(path)}:{line}" if line is not None else file_name(path)


def below(path: str, cwd: str | None = None) -> str:
    """``path`` relative to ``cwd`` (default: the working directory) when it lies below it,
    else unchanged: a report never shows ``../../x.py``."""
    try:
        rel = os.path.relpath(path, cwd) if cwd else os.path.relpath(path)
    except ValueError:  # another drive, an empty path
        return path
    return path if rel.startswith("..") else rel
