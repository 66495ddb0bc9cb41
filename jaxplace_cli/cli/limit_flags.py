"""The budget limits as command-line flags: ``--max-h2d N``, ..., ``--fail-on SEVERITY``, one
typer option per row of model/budget_limits.py ``LIMITS`` (name, metavar and help from the
row), so a limit added there is a flag of ``jaxplace audit`` without another line here.

typer reads a command's options from its signature, so ``with_limit_flags`` writes them into
it: the command takes ``**limits`` and receives each flag's value under its parameter name
(``max_h2d``); ``given_limits`` turns those into budget keys for ``budget_file.merge_flags``.
"""
from __future__ import annotations

import inspect
from typing import Optional

import typer

from jaxplace_cli.model.budget_limits import COUNT, LIMITS


def _option(lim) -> inspect.Parameter:
    kind = int if lim.unit == COUNT else str  # a size or severity is read by merge_flags
    return inspect.Parameter(lim.param, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[kind],
                             default=typer.Option(None, lim.flag, metavar=lim.metavar, help=lim.help))


def with_limit_flags(command):
    """``command``'s ``**limits`` parameter replaced by one option per limit, in table order."""
    sig = inspect.signature(command, eval_str=True)
    params = [p for p in sig.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = sig.replace(parameters=[*params, *map(_option, LIMITS)])
    return command


def given_limits(values: dict) -> dict:
    """The flags given (not None), keyed by budget key: ``{"d2h.count_per_step": 0}``."""
    return {lim.key: values[lim.param] for lim in LIMITS if values.get(lim.param) is not None}
