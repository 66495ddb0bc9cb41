"""``jaxplace run``: its command line, parsed by argparse (as ``memray run`` does).

Why not typer: ``jaxplace run`` is the one command whose start-up time is the user's program's
time, and importing typer costs ~0.3 s here (it imports pydantic) — on a 2 s script that alone
is x1.15. argparse with ``REMAINDER`` also gives exactly python's rule: everything after the
script (or ``-m MODULE``) belongs to the script.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxplace_cli.model.errors import JaxplaceError

DESCRIPTION = "Run SCRIPT (or -m MODULE) exactly like python, recording every op and transfer."
EPILOG = """\
jaxplace's options go before the script: everything after the script name
is passed to the script (a `--` too, as python passes it). The exit code,
stdout and stderr are the script's own; on stderr jaxplace says where the run
goes when it starts, and after it what was recorded and the verdict: the
audit's first line and each error or warning finding in one line (--quiet:
that first line only, when the script completed and the verdict has an error
or a warning).

examples:
  jaxplace run train.py --epochs 3
  jaxplace run --devices 4 --policy rr --out runs/rr trials.py
  jaxplace run --budget audits/train.toml -q train.py   # CI: exit 1 over it
  jaxplace run -m mypkg.train --lr 0.1
"""


class RunUsageError(JaxplaceError):
    """A bad ``jaxplace run`` command line (exit 2, one line)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, never argparse's usage block
        raise RunUsageError(message + _did_you_mean(self, message))


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """`` (did you mean '--devices'?)`` for ``unrecognized arguments: --devcies 2``, as the
    typer commands say it."""
    from jaxplace_cli.cli.common import did_you_mean

    prefix = "unrecognized arguments: "
    if not message.startswith(prefix):
        return ""
    known = [s for a in parser._actions for s in a.option_strings]
    for word in message[len(prefix):].split():
        if word.startswith("-"):
            hint = did_you_mean(word.split("=", 1)[0], known)
            if hint:
                return hint
    return ""


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text}")
    return value


def _path(text: str) -> Path:
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    from jaxplace_cli.capture.trace_modes import TRACE_MODES, TRACE_OPS, TRACE_SECONDS

    p = _Parser(prog="jaxplace run", description=DESCRIPTION, epilog=EPILOG, allow_abbrev=False,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--module", metavar="MODULE", help="run a module as `python -m` would")
    p.add_argument("--out", metavar="DIR", type=_path,
                   help="run directory to create (default jaxplace-runs/<script>-<timestamp>/; never overwritten)")
    p.add_argument("--devices", metavar="N|SPEC",
                   help="N: simulate N CPU devices (sets XLA_FLAGS before JAX is imported); "
                        "SPEC (gpu, cpu:0,cpu:1): the devices a policy may use")
    p.add_argument("-p", "--policy", default="default", metavar="POLICY",
                   help="placement policy: default, pin:DEVICE, rr, rr-strict, RULES.toml, FILE.py:NAME "
                        "or module:NAME (docs/policies.md; default: %(default)s)")
    p.add_argument("--on-policy-error", choices=("raise", "fallback"), default="raise",
                   help="raise: stop with one line, exit 2; fallback: let JAX decide and record it "
                        "(default: %(default)s)")
    p.add_argument("--granularity", choices=("unit", "op"), default="unit",
                   help="unit: place eager ops and jit calls whole; op: also place the primitives "
                        "inside jitted functions (default: %(default)s)")
    p.add_argument("--trace", choices=TRACE_MODES, default="window",
                   help="native jax.profiler trace: a window on the steady state (from the third "
                        "StepTraceAnnotation step, else after the first dispatch that compiles "
                        "nothing), the full run, or off (default: %(default)s)")
    p.add_argument("--trace-seconds", type=_seconds, default=TRACE_SECONDS, metavar="S",
                   help="the window closes after S seconds (default: %(default)s)")
    p.add_argument("--trace-ops", type=_count, default=TRACE_OPS, metavar="N",
                   help="... or after N dispatched ops, whichever comes first (0: no limit; default: %(default)s)")
    p.add_argument("--no-trace", action="store_true", help="same as --trace off")
    p.add_argument("--record", choices=("all", "transfers"), default="all",
                   help="all: every op and transfer; transfers: skip the eager-op hooks (cheaper on "
                        "eager code; jit calls, device_put/get and host reads are still recorded)")
    p.add_argument("-b", "--budget", metavar="FILE", type=_path,
                   help="budget file (TOML, docs/budgets.md): after the run, exit 1 when a limit is "
                        "exceeded (the script's own failure code wins)")
    p.add_argument("--follow-children", action="store_true",
                   help="also record child Pythons that use JAX (subprocess, multiprocessing spawn) "
                        "into RUN/children/<pid>/; fork children without exec are not recorded")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no start line, status line or summary: at most the verdict, in one line "
                        "(with --budget, also its verdict and how the script's exit code is kept)")
    p.add_argument("script", nargs="?", help="the Python script to run (-: read it from stdin, as python -)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return p


def split(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    """jaxplace's options | the script (or -m MODULE) and its arguments, split as python splits:
    the first word that is not an option or an option's value starts the script's part, which
    is passed on untouched (a ``--`` after the script included; argparse would drop it)."""
    takes_value = {s for a in parser._actions for s in a.option_strings if a.nargs != 0}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[:i], argv[i + 1:i + 2] and ["--", *argv[i + 1:]]
        if not tok.startswith("-") or tok == "-":
            break
        if tok in ("-m", "--module"):
            return argv[:i + 2], argv[i + 2:]
        i += 2 if tok in takes_value else 1
    return argv[:i], argv[i:]


def misplaced(parser: argparse.ArgumentParser, script_args: list[str]) -> list[str]:
    """jaxplace's own long options (with their values) among the script's arguments, up to a
    ``--``: python's rule gives them to the script (and so does jaxplace), but a user who wrote
    ``train.py --policy rr`` meant them for jaxplace, so ``run`` says where they went. ``--help``
    is left out: ``train.py --help`` asks the script."""
    own = {s: a for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    found, i = [], 0
    while i < len(script_args):
        tok = script_args[i]
        if tok == "--":
            break
        action = own.get(tok.split("=", 1)[0])
        if action is not None:
            found.append(tok)
            value = i + 1 < len(script_args) and not script_args[i + 1].startswith("-")
            if "=" not in tok and action.nargs != 0 and value:
                found.append(script_args[i + 1])
                i += 1
        i += 1
    return found


def parse(argv: list[str]) -> dict:
    """``run_script`` keyword arguments for ``jaxplace run ARGV`` (RunUsageError if bad)."""
    parser = build_parser()
    options, rest = split(parser, list(argv))
    if rest[:1] == ["--"]:  # `jaxplace run [opts] -- -odd-name.py ...`
        rest = rest[1:]
        ns = parser.parse_args(options)
        ns.script, ns.args = rest[0], rest[1:]
    else:
        ns = parser.parse_args(options)
        if ns.module is not None:
            ns.args = rest
        elif rest:
            ns.script, ns.args = rest[0], rest[1:]
    if ns.script is None and ns.module is None:
        raise RunUsageError("nothing to run: give a script (jaxplace run train.py) or -m MODULE")
    return {**vars(ns), "misplaced": misplaced(parser, ns.args)}


def main(argv: list[str]) -> None:
    """``jaxplace run ARGV``; ends in SystemExit with the script's exit code."""
    from jaxplace_cli.cli.run_script import run_script

    run_script(**parse(argv))
    sys.exit(0)
