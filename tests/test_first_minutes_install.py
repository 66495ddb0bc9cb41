"""Issue 26, item 1: jaxplace as a new user installs it, outside the checkout and its venv.

A wheel is built from the checkout (`pip wheel --no-deps`), installed with `--no-deps` into a
fresh virtual environment, and used from a temporary working directory, so what runs is the
installed package: its console script, its C extensions, its package data (the HTML report's
script and style in report/assets). The fresh environment first has none of jaxplace's
dependencies: `python -m jaxplace_cli` there is one line saying how to install, not an internal
error. Then a .pth file makes this (dev) environment's site-packages visible to it, so nothing
is downloaded, and the installed jaxplace records the new-user walkthrough's training script
(a NumPy loader and a constant mask: `run`'s verdict names the mask, not the loader), audits it
and writes the HTML page.

The wheel is built without build isolation when this environment has setuptools >= 77 (what
pyproject.toml asks for; `make install` puts it there), else pip builds it in an isolated
environment from the configured index.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import REPO
from test_loader_uploads import TRAIN


def _setuptools_ok() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


def _source_copy(dst: Path) -> Path:
    """The files a wheel is built from, without this checkout's in-place builds (*.so) and
    caches: the wheel compiles its own extensions, and the checkout stays as it was."""
    dst.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dst / name)
    shutil.copytree(REPO / "jaxplace_cli", dst / "jaxplace_cli",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.pyc"))
    return dst


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS", "JAXPLACE_CAPTURE")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _in(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=300)


def test_a_wheel_from_the_checkout_installs_records_audits_and_renders(tmp_path):
    src = _source_copy(tmp_path / "src")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(tmp_path / "dist")]
    if _setuptools_ok():
        build.insert(5, "--no-build-isolation")
    proc = subprocess.run(build, capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("jaxplace-*.whl"))

    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py, exe = venv / "bin" / "python", venv / "bin" / "jaxplace"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    work = tmp_path / "work"  # not the checkout: `jaxplace_cli` can only come from the venv
    work.mkdir()

    # no dependency installed yet: how to install, in one line (was "internal error: ModuleNotFoundError")
    bare = _in(py, "-m", "jaxplace_cli", "audit", "nowhere", cwd=work)
    assert bare.returncode == 2 and bare.stdout == "", bare.stderr
    assert bare.stderr.count("\n") == 1 and "internal error" not in bare.stderr, bare.stderr
    assert bare.stderr.startswith(f"jaxplace: error: this Python ({py}) lacks ")
    assert "source .venv/bin/activate" in bare.stderr and "pip install ." in bare.stderr

    site = Path(_in(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=work).stdout.strip())
    (site / "dev-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = _in(py, "-c", "import jaxplace_cli, jax; print(jaxplace_cli.__file__)", cwd=work)
    assert where.returncode == 0, where.stderr
    package = Path(where.stdout.strip()).parent
    assert package == site / "jaxplace_cli"
    assert sorted(p.name for p in (package / "report" / "assets").iterdir()) == ["report.css", "report.js", "stacks.js"]
    # the C extensions are optional (no compiler: the pure-Python path); built here, the wheel has them
    native = bool(list((REPO / "jaxplace_cli" / "capture").glob("_native*.so")))
    assert bool(list(package.glob("capture/_native*.so")) and list(package.glob("model/_packed*.so"))) == native

    # the walkthrough (issue 26's acceptance): a training script with a NumPy loader and a
    # constant mask; the verdict `run` ends with names the mask's re-upload, never the loader
    (work / "train.py").write_text(TRAIN.format(prepare="", what="the same array again"))
    run = _in(exe, "run", "--no-trace", "--out", "run", "train.py", cwd=work)
    assert run.returncode == 0, run.stderr
    plain = _in(py, "train.py", cwd=work)
    assert (run.stdout, run.returncode) == (plain.stdout, plain.returncode)
    verdict = [ln for ln in run.stderr.splitlines() if ln.startswith("jaxplace:   ")]
    assert len(verdict) == 1 and "warning train.py:21 implicit-h2d-in-loop" in verdict[0], run.stderr
    assert "`mask`" in verdict[0] and "batch" not in run.stderr, run.stderr
    manifest = json.loads((work / "run" / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["capture"] == ("native" if native else "python")

    audit = _in(exe, "audit", "run", "--format", "json", cwd=work)
    assert audit.returncode == 0, audit.stderr
    warned = [(f["rule"], f["line"]) for f in json.loads(audit.stdout)["findings"] if f["severity"] != "info"]
    assert warned == [("implicit-h2d-in-loop", 21)]

    page = _in(exe, "report", "run", "-o", "run.html", cwd=work)
    assert page.returncode == 0, page.stderr
    html = (work / "run.html").read_text()
    script = (package / "report" / "assets" / "report.js").read_text()
    assert script.strip()[:200] in html  # the package data made it into the page
