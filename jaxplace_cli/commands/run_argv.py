"""``jaxplace run``'s command line, parsed without typer.

Why: ``jaxplace run`` is the one command whose start-up time is the user's program's time.
Importing typer and building its parameters costs ~0.3 s here (it imports pydantic) — on a
2 s script that alone is x1.15. This parser understands the common forms only and returns
None for anything else (``-m``, ``--help``, an unknown option, a value it cannot convert, a
bundled short option): typer then parses it, with its own messages. The option table and
the defaults below are the only copy: the typer signature (run.py) takes its defaults from
``RUN_DEFAULTS``, and tests/test_cli_run_argv.py checks that both parsers know the same
options and agree on every command line it tries.
"""
from __future__ import annotations

from pathlib import Path

RUN_DEFAULTS: dict = {
    "out": None,
    "devices": None,
    "policy": "default",
    "on_policy_error": "raise",
    "granularity": "unit",
    "trace": "window",
    "trace_seconds": 1.0,
    "trace_ops": 100,
    "no_trace": False,
    "record": "all",
    "budget": None,
    "follow_children": False,
    "quiet": False,
}

# flag -> (parameter, kind). kinds: str, path, seconds (float >= 0), count (int >= 0), flag
RUN_OPTIONS: dict[str, tuple[str, str]] = {
    "--out": ("out", "path"), "-o": ("out", "path"),
    "--devices": ("devices", "str"),
    "--policy": ("policy", "str"), "-p": ("policy", "str"),
    "--on-policy-error": ("on_policy_error", "str"),
    "--granularity": ("granularity", "str"),
    "--trace": ("trace", "str"),
    "--trace-seconds": ("trace_seconds", "seconds"),
    "--trace-ops": ("trace_ops", "count"),
    "--no-trace": ("no_trace", "flag"),
    "--record": ("record", "str"),
    "--budget": ("budget", "path"), "-b": ("budget", "path"),
    "--follow-children": ("follow_children", "flag"),
    "--quiet": ("quiet", "flag"), "-q": ("quiet", "flag"),
}


def _convert(kind: str, text: str):
    """The option's value, or None where typer should judge (and word the error)."""
    if kind == "str":
        return text
    if kind == "path":
        return Path(text) if text else None
    try:
        value = float(text) if kind == "seconds" else int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def parse_run_argv(argv: list[str]) -> dict | None:
    """``run_script`` keyword arguments for ``jaxplace run ARGV``, or None (typer's turn)."""
    opts = dict(RUN_DEFAULTS)
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            i += 1
            break
        if not tok.startswith("-") or tok == "-":
            break
        name, eq, inline = tok.partition("=")
        if not name.startswith("--"):
            name, eq, inline = tok, "", ""  # short options: only `-o VALUE` and `-q`
        spec = RUN_OPTIONS.get(name)
        if spec is None:
            return None  # -m, -h/--help, an unknown or bundled option
        param, kind = spec
        if kind == "flag":
            if eq:
                return None
            opts[param] = True
            i += 1
            continue
        if eq:
            text = inline
            i += 1
        else:
            if i + 1 >= len(argv):
                return None
            text = argv[i + 1]
            i += 2
        value = _convert(kind, text)
        if value is None:
            return None
        opts[param] = value
    if i >= len(argv):
        return None  # no script: typer says what is missing
    script = argv[i]
    if script.startswith("-") and argv[i - 1:i] != ["--"]:
        return None
    return {"script": script, "args": list(argv[i + 1:]), "module": None, **opts}
