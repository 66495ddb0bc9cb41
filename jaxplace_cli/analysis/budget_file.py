"""A transfer budget as data: the strict TOML format, the same limits given as flags, and what
a budget's ``allow`` patterns match. The check of a run against it is analysis/budgets.py; the
keys, flags and keywords come from one table, model/budget_limits.py.

Parsing is strict on purpose: a typo in a budget file would otherwise silently disable a limit,
so an unknown key is an error (exit 2) that names the key and the file, before anything runs.
docs/budgets.md documents the format.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli.model.budget_limits import (
    BY_KEY,
    FAIL_ON,
    KIND_KEYS,
    MEMORY,
    MEMORY_KEYS,
    RUN_LIMITS,
    SEVERITY,
    SIZE,
    SIZE_KEYS,
    TOP_KEYS,
)
from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.severity import SEVERITIES
from jaxplace_cli.model.sizes import MAX_SIZE, parse_size
from jaxplace_cli.model.untrusted import load_toml


class BudgetError(JaxplaceError):
    """A budget that cannot be used: one line naming the file and the key."""


@dataclass
class Budget:
    source: str = "flags"
    min_bytes: int | None = None  # None: the audit's --min-bytes
    fail_on: str | None = None  # a finding of this severity or worse fails the budget
    allow: list[str] = field(default_factory=list)  # "file:line" globs not counted
    kinds: dict[str, dict[str, int]] = field(default_factory=dict)  # "h2d" -> {"count": 3}; "memory" -> {"peak": n}
    pingpong: int | None = None
    host_syncs_per_step: int | None = None
    recompiles: int | None = None
    total: dict[str, dict[str, int]] = field(default_factory=dict)  # [total.h2d]: a whole job's

    def limit_names(self) -> list[str]:
        """Every limit this budget checks (one JUnit testcase each)."""
        names = [f"{k}.{key}" for k, limits in self.kinds.items() for key in limits]
        names += [k for k in RUN_LIMITS if getattr(self, k) is not None]
        if self.fail_on:
            names.append(f"{FAIL_ON}.{self.fail_on}")
        names += [f"total.{k}.{key}" for k, limits in self.total.items() for key in limits]
        return names

    def is_empty(self) -> bool:
        return not (self.fail_on or self.kinds or self.total
                    or any(getattr(self, k) is not None for k in RUN_LIMITS))

    def allows(self, file: str, line: int) -> bool:
        """``file:line`` matches an ``allow`` pattern (``train.py:41``, ``*/loader.py:*``; a
        pattern without ``:LINE`` covers the whole file) against the full path or any trailing
        part of it."""
        text = f"{file}:{line}"
        for p in self.allow:
            if ":" not in p:
                p += ":*"
            if fnmatch.fnmatchcase(text, p) or fnmatch.fnmatchcase(text, "*/" + p.lstrip("/")):
                return True
        return False

    def allowed_sites(self, sites: dict) -> set[int]:
        """The ids of ``sites`` whose transfers the budget does not count."""
        return {sid for sid, s in sites.items() if self.allows(s.file, s.line)} if self.allow else set()


@dataclass
class Breach:
    rule: str  # e.g. "d2h.count_per_step"
    limit: int
    actual: int
    message: str
    file: str = ""
    line: int = 0


def _int(value, key: str, where: str, size: bool = False) -> int:
    try:
        if size:
            return parse_size(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{_show(value)} is not a non-negative integer")
        if value > MAX_SIZE:
            raise ValueError(f"a {value.bit_length()}-bit number is larger than any count (at most {MAX_SIZE:,})")
        return value
    except ValueError as exc:
        raise BudgetError(f"{where}: {key}: {exc}") from None


def _show(value) -> str:
    text = repr(value) if not isinstance(value, int) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def load_budget(path: str | Path) -> Budget:
    """A budget file, read bounded (a regular file of at most 1 MiB: model/untrusted.py)."""
    path = Path(path)
    return budget_from_dict(load_toml(path, "budget file", BudgetError), str(path))


def budget_from_dict(data: dict, where: str) -> Budget:
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise BudgetError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(TOP_KEYS)})")
    if data.get("version", 1) != 1:
        raise BudgetError(f"{where}: version {data['version']!r} is not supported (this jaxplace reads 1)")
    b = Budget(source=where)
    if "min_bytes" in data:
        b.min_bytes = _int(data["min_bytes"], "min_bytes", where, size=True)
    if FAIL_ON in data:
        if data[FAIL_ON] not in SEVERITIES:
            raise BudgetError(f"{where}: fail_on must be one of {', '.join(SEVERITIES)}, not {data[FAIL_ON]!r}")
        b.fail_on = data[FAIL_ON]
    if "allow" in data:
        allow = data["allow"]
        if not isinstance(allow, list) or not all(isinstance(a, str) and a.strip() for a in allow):
            raise BudgetError(f"{where}: allow must be a list of \"file:line\" or \"file\" patterns (globs allowed)")
        b.allow = allow
    for key in RUN_LIMITS:
        if key in data:
            setattr(b, key, _int(data[key], key, where))
    # [h2d]/[d2h]/[d2d] and [memory] (sizes of live device memory, issue 27): one check of a table
    for kind, keys in [*((k, KIND_KEYS) for k in TRANSFER_KINDS), (MEMORY, MEMORY_KEYS)]:
        if kind not in data:
            continue
        table = data[kind]
        if not isinstance(table, dict):
            raise BudgetError(f"{where}: [{kind}] must be a table with {', '.join(keys)}")
        bad = sorted(set(table) - set(keys))
        if bad:
            raise BudgetError(f"{where}: unknown key {kind}.{bad[0]!r} (known: {', '.join(keys)})")
        b.kinds[kind] = {k: _int(v, f"{kind}.{k}", where, size=kind == MEMORY or k in SIZE_KEYS)
                         for k, v in table.items()}
    if "total" in data:  # the same kind tables, for all processes of a job together
        table = data["total"]
        if not isinstance(table, dict) or set(table) - set(TRANSFER_KINDS):
            raise BudgetError(f"{where}: [total] holds only [total.h2d], [total.d2h] and [total.d2d] tables")
        b.total = budget_from_dict(table, f"{where} [total]").kinds
    return b


def merge_flags(budget: Budget | None, flags: dict) -> Budget:
    """Flag values (``--max-d2h-per-step 0``) override the file's. Keys are budget keys such
    as ``d2h.count_per_step``, ``pingpong``, ``fail_on`` (budget_limits.LIMITS); None = not given."""
    b = budget or Budget()
    given = False
    for key, value in flags.items():
        if value is None:
            continue
        lim = BY_KEY[key]
        if lim.table:
            b.kinds.setdefault(lim.table, {})[lim.name] = _int(value, f"--{key}", "flags", size=lim.unit == SIZE)
        elif lim.unit == SEVERITY:
            if value not in SEVERITIES:
                raise BudgetError(f"{lim.flag} must be one of {', '.join(SEVERITIES)}, not {value!r}")
            b.fail_on = value
        else:
            setattr(b, key, _int(value, f"--{key.replace('_', '-')}", "flags"))
        given = True
    if given and b.source != "flags":
        b.source += " + flags"
    return b
