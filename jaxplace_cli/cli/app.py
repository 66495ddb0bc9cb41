"""The typer application: every command's options, help texts and parsing.

``cli.main`` is the entry point; it uses this module for everything except a plain
``jaxplace run`` (argparse, cli/run.py). Nothing here imports JAX at module level, so
``jaxplace run --devices N`` can configure JAX before it is first imported.
"""
from __future__ import annotations

import typer

from jaxplace_cli import __version__
from jaxplace_cli.cli import audit, devices, diff, launch, run, suggest

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Profile and audit where a JAX program's ops run and which line moved which bytes.",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"jaxplace {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version_callback,
                                       is_eager=True, help="Print the version and exit.")) -> None:
    """Profile and audit where a JAX program's ops run and which line moved which bytes."""


RUN_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False,
               "help_option_names": []}


@app.command("run", context_settings=RUN_CONTEXT, add_help_option=False, help=run.DESCRIPTION,
             options_metavar="[OPTIONS] SCRIPT|-m MODULE [ARGS]...")
def _run(ctx: typer.Context) -> None:
    # cli/main.py hands `jaxplace run` to argparse before typer is imported; this entry only
    # lists the command in `jaxplace --help` (and serves callers of the typer app itself)
    run.main(list(ctx.args))


@app.command("launch", context_settings=RUN_CONTEXT, add_help_option=False, help=launch.DESCRIPTION,
             options_metavar="-n N [--devices-per-process K] [RUN OPTIONS] SCRIPT|-m MODULE [ARGS]...")
def _launch(ctx: typer.Context) -> None:
    # like run: cli/main.py hands `jaxplace launch` to argparse before typer is imported
    launch.main(list(ctx.args))

app.command("audit")(audit.audit)
app.command("devices")(devices.devices)
app.command("suggest")(suggest.suggest)
app.command("diff")(diff.diff)
