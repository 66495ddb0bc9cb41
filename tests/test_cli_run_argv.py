"""`jaxplace run`'s own small parser (commands/run_argv.py) against typer's.

The small parser exists so that a recorded script does not pay ~0.3 s for importing typer; it
must never read a command line differently. These tests pin that: same options, same
defaults, same keyword arguments on every command line below, and typer's turn (None) for
everything the small parser does not handle itself.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jaxplace_cli.commands import run as run_cmd
from jaxplace_cli.commands.run_argv import RUN_DEFAULTS, RUN_OPTIONS, parse_run_argv

ROOT = Path(__file__).resolve().parent.parent


def _typer_kwargs(argv: list[str], monkeypatch) -> dict:
    """What typer hands to run_script for `jaxplace run ARGV`."""
    from jaxplace_cli.cli import _typer_main

    seen = {}

    def capture(**kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(run_cmd, "run_script", capture)
    with pytest.raises(SystemExit):
        _typer_main(["run", *argv])
    return seen


def test_the_option_table_is_typers():
    import typer.main

    from jaxplace_cli.app import app

    command = typer.main.get_command(app).commands["run"]
    flags, defaults = {}, {}
    for p in command.params:
        if p.param_type_name != "option" or p.name in ("module", "help"):
            continue
        for flag in p.opts:
            flags[flag] = p.name
        defaults[p.name] = p.default
    assert {f: name for f, (name, _) in RUN_OPTIONS.items()} == flags
    assert {k: v for k, v in RUN_DEFAULTS.items()} == defaults


CASES = [
    ["train.py"],
    ["train.py", "--epochs", "3", "-o", "x", "--quiet"],  # after the script: the script's
    ["--out", "runs/a", "train.py"],
    ["-o", "runs/a", "-q", "train.py", "a", "b"],
    ["--out=runs/b", "--policy=rr", "--trace", "off", "train.py"],
    ["-p", "pin:cpu:1", "--devices", "4", "--record", "transfers", "train.py"],
    ["--trace-seconds", "2.5", "--trace-ops", "0", "--no-trace", "train.py", "--", "x"],
    ["--trace-seconds=0", "--trace-ops=1_000", "train.py"],
    ["--budget", "audits/ci.toml", "-b", "other.toml", "train.py"],  # the last one wins
    ["--follow-children", "--on-policy-error", "fallback", "--granularity", "op", "train.py"],
    ["--", "train.py", "--help"],
    ["--quiet", "--", "-weird-name.py"],
]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c) for c in CASES])
def test_same_reading_as_typer(argv, monkeypatch):
    fast = parse_run_argv(argv)
    assert fast is not None, argv
    assert fast == _typer_kwargs(argv, monkeypatch)


@pytest.mark.parametrize("argv", [
    [],  # nothing to run: typer's message
    ["-m", "pkg.mod"],
    ["--help"], ["-h"],
    ["--trace-ops", "-1", "train.py"],  # typer words the range error
    ["--trace-seconds", "soon", "train.py"],
    ["--unknown", "train.py"],
    ["-qo", "x", "train.py"],  # bundled short options
    ["--quiet=yes", "train.py"],
    ["--out"],
    ["--out", "", "train.py"],
])
def test_everything_else_is_typers_turn(argv):
    assert parse_run_argv(argv) is None


def test_a_recorded_script_never_imports_typer(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import sys\nprint(sorted(m for m in ('typer', 'pydantic', 'rich') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-m", "jaxplace_cli", "run", "--quiet", "--trace", "off",
                           "--out", str(tmp_path / "run"), str(script)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[]\n"
