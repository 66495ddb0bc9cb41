"""The vocabulary of budget limits: one row per limit, from which the budget file's keys
(docs/budgets.md), ``jaxplace audit``'s ``--max-*``/``--fail-on`` flags (cli/limit_flags.py) and
the keywords of the pytest marker and ``jaxplace_cli.budget()`` (integrations/budget.py) are all
derived — a limit added here exists in all three spellings, and none can drift from the others.
Here in model/, not analysis/, because every typer command builds audit's flags from it at start
and importing analysis/ costs ~0.17 s.
"""
from __future__ import annotations

from dataclasses import dataclass

from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.severity import SEVERITIES
from jaxplace_cli.model.sizes import human_bytes

COUNT, SIZE, SEVERITY = "count", "size", "severity"  # units: how a limit's value is read
METAVARS = {COUNT: "N", SIZE: "SIZE", SEVERITY: "SEVERITY"}
FAIL_ON = "fail_on"


@dataclass(frozen=True)
class Limit:
    key: str  # the budget key, also a breach's rule: "h2d.count_per_step", "pingpong", "fail_on"
    flag: str  # jaxplace audit's option: "--max-h2d-per-step"
    keyword: str  # the pytest marker's and jaxplace_cli.budget()'s keyword: "h2d_per_step"
    unit: str  # COUNT: an int >= 0; SIZE: bytes, "10 MB" allowed; SEVERITY: one of SEVERITIES
    help: str  # the flag's --help text

    @property
    def table(self) -> str:
        """The TOML table holding the key (``h2d``), or '' for a top-level key."""
        return self.key.rpartition(".")[0]

    @property
    def name(self) -> str:
        """The key inside its table (``count_per_step``)."""
        return self.key.rpartition(".")[2]

    @property
    def param(self) -> str:
        """The flag's value as a Python parameter name (``max_h2d_per_step``)."""
        return self.flag[2:].replace("-", "_")

    @property
    def metavar(self) -> str:
        return METAVARS[self.unit]


# A transfer kind's limits: (key in its [h2d]/[d2h]/[d2d] table, flag suffix, keyword suffix,
# unit, what it limits); the flag is --max-KIND<suffix>, the keyword KIND<suffix>.
_KIND_LIMITS = (
    ("count", "", "_count", COUNT, "{kind} transfers in the run"),
    ("bytes", "-bytes", "_bytes", SIZE, "{kind} bytes in the run"),
    ("count_per_step", "-per-step", "_per_step", COUNT, "{kind} transfers in any steady-state step"),
    ("bytes_per_step", "-bytes-per-step", "_bytes_per_step", SIZE, "{kind} bytes in any steady-state step"),
)
_HELP_NOTES = {"h2d.bytes": ", e.g. 10MB", "d2h.count": " (every read, any size)"}
# The [memory] table (issue 27): live device memory of the jax.Arrays a run held (analysis/memory.py).
MEMORY = "memory"
_MEMORY_LIMITS = (
    ("peak", "--max-peak-memory", "memory_peak", "live device memory of any one device at its peak, e.g. 9MiB"),
    ("peak_total", "--max-peak-memory-total", "memory_peak_total", "live device memory of all devices together at its peak"),
    ("growth_per_step", "--max-memory-growth-per-step", "memory_growth_per_step",
     "growth of live device memory per steady-state step on any device"),
)
MEMORY_KEYS = tuple(key for key, *_ in _MEMORY_LIMITS)


def _limit(what: str) -> str:
    return f"Limit: {what}."


LIMITS: tuple[Limit, ...] = (
    *(Limit(f"{kind}.{key}", f"--max-{kind}{flag}", f"{kind}{keyword}", unit,
            _limit(what.format(kind=kind) + _HELP_NOTES.get(f"{kind}.{key}", "")))
      for kind in TRANSFER_KINDS for key, flag, keyword, unit, what in _KIND_LIMITS),
    Limit("pingpong", "--max-pingpong", "pingpong", COUNT, _limit("ping-pong returns (moves of data back to a device it had left)")),
    Limit("host_syncs_per_step", "--max-host-syncs-per-step", "host_syncs_per_step", COUNT,
          _limit("blocking reads in any steady-state step")),
    Limit("recompiles", "--max-recompiles", "recompiles", COUNT, _limit("recompiles found by the recompile rule")),
    *(Limit(f"{MEMORY}.{key}", flag, keyword, SIZE, _limit(what)) for key, flag, keyword, what in _MEMORY_LIMITS),
    Limit(FAIL_ON, "--fail-on", FAIL_ON, SEVERITY,
          f"Fail (exit 1) on any finding of this severity or worse: {', '.join(SEVERITIES)}."),
)
BY_KEY = {lim.key: lim for lim in LIMITS}

# -- the budget file's keys --------------------------------------------------------------------
KIND_KEYS = tuple(key for key, *_ in _KIND_LIMITS)  # inside [h2d], [d2h], [d2d]
SIZE_KEYS = tuple(key for key, _, _, unit, _ in _KIND_LIMITS if unit == SIZE)
RUN_LIMITS = tuple(lim.key for lim in LIMITS if not lim.table and lim.unit == COUNT)  # top-level ints
MIN_BYTES, ALLOW = "min_bytes", "allow"
SETTINGS = (MIN_BYTES, ALLOW)  # keys of a budget that are not limits (also keywords)
# every top-level key, in the order an "unknown key" error lists them
TOP_KEYS = ("version", MIN_BYTES, FAIL_ON, ALLOW, *RUN_LIMITS, *TRANSFER_KINDS, "total", MEMORY)

# -- the keywords of the pytest marker and jaxplace_cli.budget() -------------------------------
# keyword -> budget key; a bare kind (h2d=3, h2d="1 MB") is a shorthand integrations/budget.py reads
KEYWORDS = {lim.keyword: lim.key for lim in LIMITS}
KEYWORDS.update({key: key for key in SETTINGS})
KEYWORDS["host_syncs"] = "host_syncs_per_step"  # kept: an early spelling


def limit_text(key: str, value: int) -> str:
    """A limit's value as a breach says it: ``10.0 MiB`` for a size, ``3`` for a count
    (``key``: a kind's key such as ``bytes_per_step``)."""
    return human_bytes(value) if key in SIZE_KEYS or key in MEMORY_KEYS else str(value)


def limit_noun(key: str) -> str:
    """What a kind's whole-run ``count``/``bytes`` counts."""
    return "transfers" if key == "count" else "bytes"
