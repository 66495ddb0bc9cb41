"""Refactors keep the audit byte for byte (issue 12).

``tests/data/golden_runs/<case>/`` holds the run directory (run.json + events.sqlite) that
``jaxplace run --no-trace`` made of each sample script case of test_dogfood.py, and
``<case>.json`` the ``audit --format json`` that the code *before* the layout move printed for
it. Re-record them only for a deliberate change of the audit's output, and say so in the commit.
"""
import pytest
from conftest import REPO, cli

GOLDEN = REPO / "tests" / "data" / "golden_runs"
CASES = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())


def test_every_dogfood_case_has_a_golden_run():
    from test_dogfood import CASES as DOGFOOD

    assert set(CASES) == set(DOGFOOD)


@pytest.mark.parametrize("case", CASES)
def test_audit_json_is_byte_identical(case):
    proc = cli("audit", case, "--format", "json", cwd=GOLDEN)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (GOLDEN / f"{case}.json").read_text()
