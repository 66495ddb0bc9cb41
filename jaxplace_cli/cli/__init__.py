"""The command line: ``main`` (the entry point: one line per error, exit codes), ``app`` (typer),
and one thin module per command over library code; ``run`` is parsed by argparse (no typer
import on the path of every recorded script)."""
