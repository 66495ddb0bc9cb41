"""``with jaxplace_cli.budget(...)`` failing in a test (issue 14): pytest shows the user's
``with`` line and the breach, no contextlib or jaxplace frames, and a size limit is said the way
the user wrote it."""
pytest_plugins = ["pytester"]

TEST = '''
import jax, jax.numpy as jnp, numpy as np
import jaxplace_cli

f = jax.jit(lambda x: (x * 2).sum())


def test_uploads():
    with jaxplace_cli.budget(h2d="10 KB"):
        for _ in range(3):
            f(np.ones((2048,), np.float32))   # 3 x 8 KiB = 24 KiB > 10 KB


@jaxplace_cli.budget(d2h=0)
def test_decorated():
    float(f(jnp.ones(8)))
'''


def test_failing_budget_block_hides_its_own_frames(pytester):
    pytester.makepyfile(test_blocks=TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "Test was limited to 10 KB of h2d transfers but moved 24.0 KiB" in out  # as written
    assert "9.8 KiB" not in out
    assert "Test was limited to 0 d2h transfers but did 1" in out  # as a decorator too
    # the traceback is the test's own lines: no contextlib, no jaxplace source
    assert "contextlib.py" not in out and "jaxplace_cli/integrations" not in out, out
    assert ">       with jaxplace_cli.budget(h2d=\"10 KB\"):" in out
