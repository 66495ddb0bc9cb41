"""The pytest plugin (issue 5): markers fail tests that exceed their transfer budget, pass
those that do not; a context manager; an ini default that markers override. Run with
pytester in a subprocess, as a user's suite would run."""
import pytest

pytest_plugins = ["pytester"]

TESTS = '''
import jax, jax.numpy as jnp, numpy as np, pytest
import jaxplace_cli

f = jax.jit(lambda x: (x * 2).sum())   # created at import time: still recorded


@pytest.mark.transfer_budget(d2h=0)
def test_reads_back_three_times():
    for _ in range(3):
        float(f(jnp.ones(8)))


@pytest.mark.transfer_budget(d2h=0, h2d="1 KiB")
def test_clean():
    f(jnp.ones(8)).block_until_ready()


@pytest.mark.transfer_budget(h2d=1)
def test_two_numpy_uploads():
    for _ in range(2):
        f(np.ones((512,), np.float32))   # 2 KiB each, implicit


def test_unmarked_uses_ini_default():
    float(f(jnp.ones(8)))


@pytest.mark.transfer_budget(d2h=5)
def test_marker_overrides_ini():
    float(f(jnp.ones(8)))


@pytest.mark.transfer_budget(d2h_per_stpe=0)
def test_typo_in_marker():
    pass


@pytest.mark.transfer_budget(h2d="5 KiB")
def test_three_uploads_of_2_kib():
    for _ in range(3):
        f(np.ones((512,), np.float32))   # 3 x 2 KiB = 6 KiB > 5 KiB


def test_context_manager():
    with pytest.raises(jaxplace_cli.BudgetExceeded, match="Test was limited to 0 d2h transfers but did 2"):
        with jaxplace_cli.budget(d2h=0):
            float(f(jnp.ones(8)))
            float(f(jnp.ones(8)))
'''


@pytest.mark.slow
def test_plugin_markers_ini_and_context_manager(pytester):
    pytester.makepyfile(test_budgets=TESTS)
    pytester.makeini("[pytest]\ntransfer_budget = d2h=0\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3, failed=5)
    out = result.stdout.str()
    assert "Test was limited to 0 d2h transfers but did 3" in out
    assert "Test was limited to 1 h2d transfers but did 2" in out
    assert "Test was limited to 5 KiB of h2d transfers but moved 6.0 KiB" in out  # the limit as written
    # a typo must not silently disable a limit: the test fails with one line naming it
    assert ("test_budgets.py::test_typo_in_marker: transfer_budget: unknown keyword "
            "'d2h_per_stpe' (did you mean 'd2h_per_step'?)") in out
    assert "Traceback" not in out and "UsageError" not in out
    # makepyfile drops the leading empty line: list index i is file line i
    line = TESTS.splitlines().index("        f(np.ones((512,), np.float32))   # 2 KiB each, implicit")
    assert f"test_budgets.py:{line} h2d x2 4.0 KiB jit(<lambda>) (numpy argument)" in out  # top site
    failed = {line.split("::")[1].split(" ")[0] for line in out.splitlines() if line.startswith("FAILED")}
    assert failed == {"test_reads_back_three_times", "test_two_numpy_uploads", "test_unmarked_uses_ini_default",
                      "test_typo_in_marker", "test_three_uploads_of_2_kib"}


def test_ini_typo_is_a_usage_error(pytester):
    pytester.makepyfile(test_nothing="def test_ok():\n    pass\n")
    pytester.makeini("[pytest]\ntransfer_budget = d2h=0 pingpnog=0\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0] == ("ERROR: transfer_budget ini option: unknown keyword 'pingpnog' "
                                      "(did you mean 'pingpong'?)")


@pytest.mark.slow
def test_plugin_with_xdist(pytester):
    pytester.makepyfile(test_budgets=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-n", "2", "--jaxplace")
    result.assert_outcomes(passed=4, failed=4)


SCRIPT = '''
import sys
sys.modules["pytest"] = None  # a plain program: pytest is not installed there
import jax.numpy as jnp
from jaxplace_cli.integrations.budget import BudgetExceeded, budget

with budget(d2h=1):
    float(jnp.ones(4).sum())  # 1 read: within the budget
try:
    with budget(d2h=0, h2d_count=0):
        float(jnp.ones(4).sum())
except BudgetExceeded as exc:
    print(str(exc).splitlines()[0])
'''


def test_budget_block_works_without_pytest(tmp_path):
    from conftest import python

    script = tmp_path / "plain.py"
    script.write_text(SCRIPT)
    proc = python(script)
    assert proc.returncode == 0, proc.stderr
    # the file starts with SCRIPT's empty first line: list index i is file line i + 1
    line = [i + 1 for i, x in enumerate(SCRIPT.splitlines()) if "float(" in x][1]  # the breach
    assert proc.stdout.startswith(f"Test was limited to 0 d2h transfers but did 1 (plain.py:{line} float())")
