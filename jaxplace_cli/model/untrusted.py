"""Reading a file that came from anywhere: budgets, rules files, baselines, manifests, graphs.

Everything ``audit``, ``diff`` and ``suggest`` read is untrusted (docs/security.md), and so are
the budget and policy files a CI step is handed by a pull request. This is the one reader for
them: bounded in size before a byte is parsed, regular files only, JSON of bounded depth,
numbers that are finite and of a sane size, every failure one line naming the file. Measured on
main before it: a budget symlinked to ``/dev/zero`` grew to 5.3 GB, a FIFO hung, JSON nested
100,000 deep ended in an internal error (RecursionError).

The one module of ``model/`` that touches the file system: every stage that reads such a file
(placement, analysis, suggest, store) may import ``model/`` and nothing else in common.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

from jaxplace_cli.model.errors import JaxplaceError

KiB, MiB = 1 << 10, 1 << 20
# Limits (docs/security.md lists them): far above any file jaxplace writes or a user types.
MAX_TOML_BYTES = 1 * MiB  # budgets and rules files: a few hundred bytes in practice
MAX_MANIFEST_BYTES = 16 * MiB  # run.json: 2-20 KiB in the sample runs
MAX_BASELINE_BYTES = 256 * MiB  # a saved audit JSON: ~300 bytes a site; --top 10000 is 3 MiB
MAX_GRAPH_BYTES = 64 * MiB  # a placement graph: the published ones are 8-25 KiB
MAX_JSON_DEPTH = 64  # jaxplace's own JSON nests 4 levels deep
MAX_INT_DIGITS = 20  # an integer in JSON or TOML: 2**64 has 20 digits


class UntrustedFileError(JaxplaceError):
    """A file that cannot be read safely: not a regular file, too large, not UTF-8, not valid
    JSON/TOML, too deep, absurd numbers (exit code 2)."""


def read_bytes(path, what: str, limit: int, error: type[JaxplaceError] = UntrustedFileError) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    Opened non-blocking (a FIFO must not hang the open) and checked on the open descriptor
    (a symlink to ``/dev/zero`` is a character device, whatever its name); at most ``limit``
    + 1 bytes are ever read, so a file that grows meanwhile cannot exhaust memory either."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise error(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path} is not a regular file ({_kind(st.st_mode)}); jaxplace reads "
                        "only regular files")
        if st.st_size > limit:
            raise error(f"{what} {path} is {st.st_size:,} bytes, more than the {limit:,} bytes "
                        f"jaxplace reads for a {what}")
        chunks, n = [], 0
        while n <= limit:
            chunk = os.read(fd, min(limit + 1 - n, 1 * MiB))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
    except OSError as exc:
        raise error(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if n > limit:
        raise error(f"{what} {path} grew past {limit:,} bytes while it was read")
    return b"".join(chunks)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def read_text(path, what: str, limit: int, error: type[JaxplaceError] = UntrustedFileError) -> str:
    data = read_bytes(path, what, limit, error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start:,})") from None


# -- JSON -----------------------------------------------------------------------------------

# A string, or an unterminated one to the end of the text: the closing quote is optional, so
# every match succeeds where it starts and the scan is one pass. With it required, each of the
# 40,000 quotes of '"' + '\\"' * 40000 started a scan to the end that failed: 19 s for 80 KB.
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


_PAIRS = re.compile(r"\[\]|\{\}")


def json_depth(text: str, at_least: int = 0) -> int:
    """How deep the arrays and objects of a JSON text nest, without parsing it: C-speed
    regular expressions drop the strings and everything but the brackets, then peel the
    innermost ``[]``/``{}`` pairs ``at_least`` times (a 18 MB file of depth 4 takes 0.2 s);
    only what is still left then is counted one bracket at a time. The result is exact when
    it exceeds ``at_least`` (or when the brackets do not balance), else ``<= at_least``."""
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    peeled = 0
    while brackets and peeled <= at_least:
        brackets, n = _PAIRS.subn("", brackets)  # each pass removes the deepest level
        if not n:
            break
        peeled += 1
    depth = deepest = 0
    for c in brackets:  # what the peeling left: deeper than at_least, or unbalanced
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return peeled + deepest


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-')):,} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _parse_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, where: str, error: type[JaxplaceError] = UntrustedFileError,
               max_depth: int = MAX_JSON_DEPTH):
    """``text`` as JSON: at most ``max_depth`` levels, integers of at most ``MAX_INT_DIGITS``
    digits, finite numbers only (NaN, Infinity and 1e999 are errors: a NaN total compares
    false with everything, so it would silently pass any limit)."""
    depth = json_depth(text, max_depth)
    if depth > max_depth:
        raise error(f"{where}: JSON nested {depth:,} levels deep (at most {max_depth})")
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_parse_constant)
    except (ValueError, RecursionError) as exc:
        raise error(f"{where} is not readable JSON: {_first_line(exc)}") from None


def parse_value(text, max_depth: int = MAX_JSON_DEPTH):
    """A JSON value stored inside another file (a store marker's value), with ``parse_json``'s
    limits; ValueError for anything it cannot be (not text, too deep, not JSON): the caller
    skips the value or makes it its own data error. ``json.loads`` alone recursed once per
    level: a marker nested 4,000 deep ended in RecursionError (exit 3)."""
    if not isinstance(text, str):
        raise ValueError(f"{type(text).__name__}, not JSON text")
    depth = json_depth(text, max_depth)
    if depth > max_depth:
        raise ValueError(f"JSON nested {depth:,} levels deep (at most {max_depth})")
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def load_json(path, what: str, limit: int, error: type[JaxplaceError] = UntrustedFileError,
              max_depth: int = MAX_JSON_DEPTH):
    return parse_json(read_text(path, what, limit, error), f"{what} {path}", error, max_depth)


def load_toml(path, what: str, error: type[JaxplaceError] = UntrustedFileError,
              limit: int = MAX_TOML_BYTES) -> dict:
    """A budget or rules file: at most ``limit`` bytes, finite floats, integers of at most
    ``MAX_INT_DIGITS`` digits (checked again by the caller's own range checks)."""
    text = read_text(path, what, limit, error)
    import tomllib  # on use: `jaxplace run` reads no TOML before the script (2 ms, issue 29)

    try:
        data = tomllib.loads(text, parse_float=_parse_float)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} {path} is not valid TOML: {_first_line(exc)}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise error(f"{what} {path} is not valid TOML: nested too deeply") from None
    except ValueError as exc:  # an integer beyond Python's 4,300-digit conversion limit
        raise error(f"{what} {path} is not valid TOML: {_first_line(exc)}") from None
    return data


def _first_line(exc) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__
