"""The typer application: every command's options, help texts and parsing.

``cli.main`` is the entry point; it uses this module for everything except a plain
``jaxplace run`` (argparse, cli/run.py). Nothing here imports JAX at module level, so
``jaxplace run --devices N`` can configure JAX before it is first imported.
"""
from __future__ import annotations

import typer

from jaxplace_cli import __version__
from jaxplace_cli.cli import audit, devices, diff, export, launch, report, run, suggest, view


def _one_metavar_style() -> None:
    """Help shows every value as one uppercase name (``PATH``, ``N``, ``FILE``): typer >= 0.16
    adds a type after an argument's name (``PATH <path>``) that options, given a metavar, do
    not have. Older typers have no such method and show none."""
    from typer.core import TyperArgument

    if hasattr(TyperArgument, "display_type_rich"):
        TyperArgument.display_type_rich = lambda self, ctx: None


_one_metavar_style()

# Plain (click-style) help, not typer's rich panels: those cut long option names at 80
# columns ("--max-h2d-bytes-per-st…") and print a "<bool>" type after every flag.
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Profile and audit where a JAX program's ops run and which line moved which bytes.",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"jaxplace {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version_callback,
                                       is_eager=True, help="Print the version and exit.")) -> None:
    """Profile and audit where a JAX program's ops run and which line moved which bytes.

    Output paths: --out DIR names a run directory (run; suggest --verify), -o/--output FILE a
    file a command writes (a report, a policy file). `jaxplace COMMAND --help` has examples.
    """


RUN_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False,
               "help_option_names": []}


@app.command("run", context_settings=RUN_CONTEXT, add_help_option=False, help=run.DESCRIPTION,
             short_help="Run a script like python, recording every op and transfer.",
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


app.command("audit", epilog=audit.EPILOG,
            short_help="Verdict, findings and transfers of a run or a profiler trace.")(audit.audit)
app.command("devices", epilog=devices.EPILOG, short_help="List the devices JAX sees.")(devices.devices)
app.command("suggest", epilog=suggest.EPILOG,
            short_help="Suggest a placement that moves fewer bytes; write it as a policy.")(suggest.suggest)
app.command("diff", epilog=diff.EPILOG, short_help="What changed in data movement between two runs.")(diff.diff)
app.command("report", short_help="One self-contained HTML report of a run: timeline, matrix, findings.")(report.report)
app.command("export", short_help="Export a run as a Chrome/Perfetto trace.")(export.export)
app.command("view", short_help="Open the run's jax.profiler trace in XProf, on 127.0.0.1 only.")(view.view)
