"""Shared test helpers: real subprocesses of `python -m jaxplace_cli`, real JAX, real files.

In-process tests get 4 simulated CPU devices: XLA_FLAGS must be set before JAX is imported,
which is why it happens here, at collection time.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    + ["--xla_force_host_platform_device_count=4"])
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# A suite started from a non-interactive shell's background job inherits SIGINT ignored, and
# children inherit an ignored signal across exec: tests that send SIGINT would then wait for
# nothing. A handler of our own is reset to the default in every child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "scripts"
SAMPLES = REPO / "sample_scripts"


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # children choose their own device count (--devices)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def jaxplace(*args, cwd=None, env=None, timeout=240, input=None) -> subprocess.CompletedProcess:
    """Run `python -m jaxplace_cli ARGS` in a subprocess and capture everything."""
    return subprocess.run([sys.executable, "-m", "jaxplace_cli", *map(str, args)],
                          cwd=cwd, env=env or child_env(), capture_output=True, text=True,
                          timeout=timeout, input=input)


def python(*args, cwd=None, env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env or child_env(),
                          capture_output=True, text=True, timeout=timeout)


def audit_json(run_dir, *extra) -> dict:
    proc = jaxplace("audit", run_dir, "--format", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def sites_by_line(report: dict, kind: str) -> dict:
    out: dict = {}
    for s in report["transfers"]["sites"]:
        if s["kind"] == kind:
            agg = out.setdefault(s["line"], {"count": 0, "bytes": 0, "sites": []})
            agg["count"] += s["count"]
            agg["bytes"] += s["bytes"]
            agg["sites"].append(s)
    return out


@pytest.fixture(scope="session")
def jax_devices():
    import jax

    devs = jax.devices()
    assert len(devs) == 4, "tests expect 4 simulated CPU devices (see conftest.py)"
    return devs
