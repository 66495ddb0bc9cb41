"""`%load_ext jaxplace_cli` (issue 16), in IPython's own InteractiveShell: `%%jaxplace` records
the cell in a fresh Python and displays the HTML report inline; `%jaxplace_audit` prints the
audit. Importing the package imports neither IPython nor JAX."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import audit_json, child_env

CELL = """\
import jax
import numpy as np
x = jax.device_put(np.ones((256, 256), np.float32), jax.devices()[1])
print("sum", float(x.sum()))
"""


@pytest.fixture()
def shell(tmp_path, monkeypatch):
    IPython = pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jaxplace_cli")
    yield ip
    InteractiveShell.clear_instance()
    del IPython


def test_cell_magic_records_the_cell_and_shows_the_report(shell, tmp_path):
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        shell.run_cell_magic("jaxplace", "--devices 2 --no-trace --out cellrun", CELL)
    assert "sum 65536.0" in cap.stdout  # the cell's own output, streamed
    assert "jaxplace: complete (exit 0)" in cap.stderr
    run = tmp_path / "cellrun"
    report = audit_json(run)
    assert report["transfers"]["totals"]["h2d"] == {"count": 1, "bytes": 256 * 256 * 4}  # the one put
    assert report["devices"] == ["cpu:0", "cpu:1"]
    [out] = [o for o in cap.outputs if "text/html" in o.data]
    frame = out.data["text/html"]
    assert frame.startswith('<div class="jaxplace"><iframe srcdoc=') and 'sandbox="allow-scripts"' in frame
    assert "&lt;!doctype html&gt;" in frame and "matrix-totals" in frame  # the page, escaped into srcdoc
    assert (tmp_path / "cellrun.html").is_file()
    cells = list((tmp_path / "jaxplace-runs" / "cells").glob("cell-*.py"))
    assert [c.read_text() for c in cells] == [CELL]  # kept: the report shows its lines


def test_audit_line_magic(shell, tmp_path):
    from IPython.utils.capture import capture_output

    with capture_output():
        shell.run_cell_magic("jaxplace", "--devices 2 --no-trace -q --out r", CELL)
    with capture_output() as cap:
        shell.run_line_magic("jaxplace_audit", "r --format json")
    assert json.loads(cap.stdout)["transfers"]["totals"]["h2d"]["count"] == 1
    with capture_output() as cap:
        shell.run_line_magic("jaxplace_audit", "r --html")
    assert any("text/html" in o.data for o in cap.outputs)


def test_package_import_loads_neither_ipython_nor_jax():
    code = "import sys, jaxplace_cli; print(sorted(m for m in ('IPython', 'jax') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env())
    assert out.stdout.strip() == "[]", out.stderr
    assert callable(__import__("jaxplace_cli").load_ipython_extension)
