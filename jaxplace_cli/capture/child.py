"""`jaxplace run --follow-children`: record the child Python processes a script starts
(``subprocess`` running python, ``multiprocessing`` spawn/forkserver workers).

How: the parent puts ``child_boot/`` first on the children's ``PYTHONPATH``; its
``sitecustomize`` calls ``start_child`` in every child Python. A child that never imports JAX
costs one environment lookup and leaves nothing behind; one that does gets its own run
directory, ``<run>/children/<pid>/``, recorded like the parent (no trace window, no policy:
placement stays the parent's business) and finalised at exit. ``jaxplace audit <run>`` lists
the child runs; each is audited on its own.

Not followed: ``fork`` children that do not exec (they inherit the parent's hooks, which go
inert in the child: JAX is not fork-safe and the parent's writer thread does not exist there),
children of other interpreters without jaxplace, and children that end by ``os._exit`` lose
the last quarter second of events (their run stays "running": audit says incomplete).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from jaxplace_cli.store.layout import CHILDREN

ENV = "JAXPLACE_FOLLOW_CHILDREN"
BOOT_DIR = Path(__file__).resolve().parent / "child_boot"


def child_environment(run_dir: Path, record: str) -> None:
    """Set this process's environment so that the Python children it starts are recorded."""
    os.environ[ENV] = json.dumps({"dir": str(Path(run_dir).resolve() / CHILDREN), "record": record})
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(BOOT_DIR) + (os.pathsep + old if old else "")


def start_child() -> None:
    """Called from ``child_boot/sitecustomize.py``: record this process once it imports JAX."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    try:
        cfg = json.loads(spec)
        root = Path(cfg["dir"])
        record = cfg.get("record", "all")
    except (ValueError, KeyError, TypeError):
        return
    from jaxplace_cli.capture.import_hook import after_import

    after_import("jax", lambda: _record_child(root, record))


def _record_child(root: Path, record: str) -> None:
    import atexit

    from jaxplace_cli.capture.jaxhooks.state import active
    from jaxplace_cli.capture.runner import Outcome
    from jaxplace_cli.capture.session import RunOptions, Session

    if active.rec is not None:  # already recorded (a fork of a recorded child)
        return
    argv = list(sys.argv) or [""]
    orig = list(getattr(sys, "orig_argv", argv))
    target = argv[0] or "-c"
    if "--multiprocessing-fork" in orig:  # python -c "from multiprocessing.spawn import ..."
        target, argv = f"multiprocessing worker of {target}", [target]
    root.mkdir(parents=True, exist_ok=True)
    opts = RunOptions("child", target, argv[1:], root / str(os.getpid()), trace="off", record=record,
                      command=orig)
    session = Session(opts)
    session.manifest.parent_pid = os.getppid()
    session.start()
    # The exit code is not visible from atexit; the manifest says so rather than guess.
    atexit.register(session.finalize, Outcome("complete", None, "child process: exit code not recorded"))
