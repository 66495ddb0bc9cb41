"""`jaxplace devices`: what JAX sees."""
from __future__ import annotations

from typing import Optional

import typer

from jaxplace_cli.model.errors import UsageError

EPILOG = """\b
example:
  jaxplace devices --devices 4 --format json   # as `jaxplace run --devices 4`
"""


def devices(
    n: Optional[int] = typer.Option(None, "--devices", min=1, metavar="N",
                                    help="Simulate N CPU devices (as jaxplace run --devices N does)."),
    format: str = typer.Option("text", "--format", "-f", metavar="FORMAT", help="text or json."),
) -> None:
    """List the devices JAX sees: name, platform, id, kind, process, memory."""
    import json

    if n is not None:
        from jaxplace_cli.capture.session import simulate_cpu_devices

        simulate_cpu_devices(n)
    import jax

    from jaxplace_cli.capture.jaxhooks.devices import describe_devices

    devs = describe_devices(jax.devices())
    if format == "json":
        typer.echo(json.dumps(devs, indent=2))
        return
    if format != "text":
        raise UsageError(f"--format must be text or json, not {format!r}")
    from rich.console import Console
    from rich.table import Table

    from jaxplace_cli.model.sizes import human_bytes

    t = Table(title=f"JAX {jax.__version__}: {len(devs)} device(s), default backend {jax.default_backend()}")
    for col in ("name", "platform", "id", "kind", "process", "memory"):
        t.add_column(col)
    for d in devs:
        mem = human_bytes(d["memory_bytes"]) if d["memory_bytes"] else "unknown"
        t.add_row(d["name"], d["platform"], str(d["id"]), d["kind"], str(d["process"]), mem)
    Console().print(t)


