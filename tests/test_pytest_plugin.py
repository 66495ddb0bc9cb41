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
    result.assert_outcomes(passed=3, failed=3)
    out = result.stdout.str()
    assert "Test was limited to 0 d2h transfers but did 3" in out
    assert "Test was limited to 1 h2d transfers but did 2" in out
    # makepyfile drops the leading empty line: list index i is file line i
    line = TESTS.splitlines().index("        f(np.ones((512,), np.float32))   # 2 KiB each, implicit")
    assert f"test_budgets.py:{line} h2d x2 4.0 KiB jit(<lambda>) (numpy argument)" in out  # top site
    failed = {line.split("::")[1].split(" ")[0] for line in out.splitlines() if line.startswith("FAILED")}
    assert failed == {"test_reads_back_three_times", "test_two_numpy_uploads", "test_unmarked_uses_ini_default"}


@pytest.mark.slow
def test_plugin_with_xdist(pytester):
    pytester.makepyfile(test_budgets=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-n", "2")
    result.assert_outcomes(passed=4, failed=2)
