"""A budget limit has three spellings — a budget file key, a ``jaxplace audit`` flag, a pytest
marker keyword — all generated from model/budget_limits.py (issue 23). These tests pin the
spellings users rely on, written out here, and check that each spelling of a limit sets the same
limit: the flags through the audit command's real (click) parser."""
from __future__ import annotations

import dataclasses

import pytest
import typer.main

from jaxplace_cli.analysis.budget_file import BudgetError, budget_from_dict, merge_flags
from jaxplace_cli.cli.app import app
from jaxplace_cli.cli.limit_flags import given_limits
from jaxplace_cli.integrations.budget import limits_to_budget
from jaxplace_cli.model.budget_limits import LIMITS

# (flag, metavar, its --help, budget file key, marker keyword), as docs/budgets.md names them
SPELLINGS = [
    ("--max-h2d", "N", "Limit: h2d transfers in the run.", "h2d.count", "h2d_count"),
    ("--max-h2d-bytes", "SIZE", "Limit: h2d bytes in the run, e.g. 10MB.", "h2d.bytes", "h2d_bytes"),
    ("--max-h2d-per-step", "N", "Limit: h2d transfers in any steady-state step.", "h2d.count_per_step",
     "h2d_per_step"),
    ("--max-h2d-bytes-per-step", "SIZE", "Limit: h2d bytes in any steady-state step.", "h2d.bytes_per_step",
     "h2d_bytes_per_step"),
    ("--max-d2h", "N", "Limit: d2h transfers in the run (every read, any size).", "d2h.count", "d2h_count"),
    ("--max-d2h-bytes", "SIZE", "Limit: d2h bytes in the run.", "d2h.bytes", "d2h_bytes"),
    ("--max-d2h-per-step", "N", "Limit: d2h transfers in any steady-state step.", "d2h.count_per_step",
     "d2h_per_step"),
    ("--max-d2h-bytes-per-step", "SIZE", "Limit: d2h bytes in any steady-state step.", "d2h.bytes_per_step",
     "d2h_bytes_per_step"),
    ("--max-d2d", "N", "Limit: d2d transfers in the run.", "d2d.count", "d2d_count"),
    ("--max-d2d-bytes", "SIZE", "Limit: d2d bytes in the run.", "d2d.bytes", "d2d_bytes"),
    ("--max-d2d-per-step", "N", "Limit: d2d transfers in any steady-state step.", "d2d.count_per_step",
     "d2d_per_step"),
    ("--max-d2d-bytes-per-step", "SIZE", "Limit: d2d bytes in any steady-state step.", "d2d.bytes_per_step",
     "d2d_bytes_per_step"),
    ("--max-pingpong", "N", "Limit: ping-pong returns (moves of data back to a device it had left).", "pingpong", "pingpong"),
    ("--max-host-syncs-per-step", "N", "Limit: blocking reads in any steady-state step.", "host_syncs_per_step",
     "host_syncs_per_step"),
    ("--max-recompiles", "N", "Limit: recompiles found by the recompile rule.", "recompiles", "recompiles"),
    ("--max-peak-memory", "SIZE", "Limit: live device memory of any one device at its peak, e.g. 9MiB.",
     "memory.peak", "memory_peak"),
    ("--max-peak-memory-total", "SIZE", "Limit: live device memory of all devices together at its peak.",
     "memory.peak_total", "memory_peak_total"),
    ("--max-memory-growth-per-step", "SIZE", "Limit: growth of live device memory per steady-state step on any device.",
     "memory.growth_per_step", "memory_growth_per_step"),
    ("--fail-on", "SEVERITY", "Fail (exit 1) on any finding of this severity or worse: error, warning, info.",
     "fail_on", "fail_on"),
]
# a value of each unit as written, and the limit it is
VALUES = {"N": ("3", 3), "SIZE": ("2KiB", 2048), "SEVERITY": ("warning", "warning")}


def _audit_command():
    return typer.main.get_command(app).commands["audit"]


def test_the_table_is_the_documented_spellings():
    assert [(lim.flag, lim.metavar, lim.help, lim.key, lim.keyword) for lim in LIMITS] == SPELLINGS


def test_audit_has_one_flag_per_limit_with_its_help():
    options = [(p.opts[0], p.metavar, p.help) for p in _audit_command().params
               if p.opts[0].startswith("--max-") and p.opts[0] != "--max-findings" or p.opts[0] == "--fail-on"]
    assert options == [row[:3] for row in SPELLINGS]


def _same(budget):
    return dataclasses.replace(budget, source="")


@pytest.mark.parametrize("flag, metavar, help_, key, keyword", SPELLINGS, ids=[row[0] for row in SPELLINGS])
def test_flag_file_key_and_keyword_set_the_same_limit(flag, metavar, help_, key, keyword):
    written, value = VALUES[metavar]
    typed = int(written) if metavar == "N" else written  # as TOML, a marker and click's int give it
    ctx = _audit_command().make_context("audit", ["RUN", flag, written])
    assert given_limits(ctx.params) == {key: typed}
    from_flag = merge_flags(None, given_limits(ctx.params))

    table, _, name = key.rpartition(".")
    from_file = budget_from_dict({table: {name: typed}} if table else {name: typed}, "b.toml")
    from_keyword = limits_to_budget({keyword: typed}, "marker")
    assert _same(from_flag) == _same(from_file) == _same(from_keyword)
    assert from_flag.limit_names() == [f"fail_on.{value}" if key == "fail_on" else key]
    assert (from_flag.kinds[table][name] if table else getattr(from_flag, name)) == value


def test_the_keys_a_budget_file_may_hold():
    with pytest.raises(BudgetError) as err:
        budget_from_dict({"pingpnog": 0}, "b.toml")
    assert str(err.value) == ("b.toml: unknown key 'pingpnog' (known: version, min_bytes, fail_on, allow, pingpong, "
                              "host_syncs_per_step, recompiles, h2d, d2h, d2d, total, memory)")
    with pytest.raises(BudgetError) as err:
        budget_from_dict({"d2h": {"cnt": 0}}, "b.toml")
    assert str(err.value) == "b.toml: unknown key d2h.'cnt' (known: count, bytes, count_per_step, bytes_per_step)"


def test_the_keywords_a_marker_may_use():
    with pytest.raises(BudgetError) as err:
        limits_to_budget({"zzz": 0}, "marker")
    assert str(err.value) == (
        "marker: unknown keyword 'zzz' (known: h2d, d2h, d2d, h2d_count, h2d_bytes, h2d_per_step, "
        "h2d_bytes_per_step, d2h_count, d2h_bytes, d2h_per_step, d2h_bytes_per_step, d2d_count, d2d_bytes, "
        "d2d_per_step, d2d_bytes_per_step, pingpong, host_syncs_per_step, recompiles, memory_peak, "
        "memory_peak_total, memory_growth_per_step, fail_on, min_bytes, allow, host_syncs)")
    # a bare kind: an int is its count, a size its bytes; host_syncs is the early spelling
    b = limits_to_budget({"h2d": 3, "d2h": "1 KiB", "host_syncs": 0, "min_bytes": "4KiB", "allow": "x.py"}, "m")
    assert (b.kinds, b.host_syncs_per_step, b.min_bytes, b.allow) == ({"h2d": {"count": 3}, "d2h": {"bytes": 1024}},
                                                                      0, 4096, ["x.py"])


def test_a_bad_flag_value_is_said_as_before():
    with pytest.raises(BudgetError, match=r"^flags: --h2d\.count: -1 is not a non-negative integer$"):
        merge_flags(None, {"h2d.count": -1})
    with pytest.raises(BudgetError, match=r"^flags: --pingpong: -1 is not a non-negative integer$"):
        merge_flags(None, {"pingpong": -1})
    with pytest.raises(BudgetError, match=r"^--fail-on must be one of error, warning, info, not 'fatal'$"):
        merge_flags(None, {"fail_on": "fatal"})
