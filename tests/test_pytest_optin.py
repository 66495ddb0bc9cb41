"""Issue 13 item 5: the pytest plugin is opt-in (``--jaxplace`` or ``jaxplace = true``), and off
it changes nothing in JAX; on, the jit wrapper stays transparent. Real pytest sessions in
subprocesses (pytester), real JAX."""
import pytest
from conftest import REPO, jaxplace, python

pytest_plugins = ["pytester"]

TESTS = '''
import jax, jax.numpy as jnp, pytest


def test_jit_type():
    print("JIT-TYPE", type(jax.jit(lambda x: x)).__name__)


@pytest.mark.transfer_budget(d2h=0)
def test_reads_back_twice():
    f = jax.jit(lambda x: (x * 2).sum())
    float(f(jnp.ones(8)))
    float(f(jnp.ones(8)))
'''


def _run(pytester, *args):
    pytester.makepyfile(test_optin=TESTS)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-s", *args)


def test_off_by_default_changes_nothing(pytester):
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "JIT-TYPE PjitFunction" in out  # jax.jit is JAX's own
    assert ("jaxplace: 1 test(s) have transfer_budget markers that were not checked; pass "
            "--jaxplace (or set jaxplace = true in the ini) to enforce them") in out


def test_flag_turns_it_on(pytester):
    result = _run(pytester, "--jaxplace")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "JIT-TYPE JitFunction" in out
    assert "Test was limited to 0 d2h transfers but did 2" in out
    assert "not checked" not in out


def test_ini_turns_it_on(pytester):
    pytester.makeini("[pytest]\njaxplace = true\n")
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    assert "JIT-TYPE JitFunction" in result.stdout.str()


def test_disabled_plugin_is_gone(pytester):
    result = _run(pytester, "-p", "no:jaxplace")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "JIT-TYPE PjitFunction" in out and "jaxplace" not in out


def test_wrapped_jax_objects_behave_as_under_python(tmp_path):
    """pickling, __wrapped__, __getstate__, lower/trace/eval_shape, filtered tracebacks,
    methods, transformations: the same stdout with and without jaxplace."""
    script = REPO / "tests" / "corpus" / "transparency.py"
    plain = python(script)
    assert plain.returncode == 0, plain.stderr
    rec = jaxplace("run", "--no-trace", "--quiet", "--out", tmp_path / "run", script)
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout == plain.stdout
    assert "wrapped is f: True" in plain.stdout
    assert "filtered traceback: [('<module>', 'broken(x)'), ('broken', " in plain.stdout


@pytest.mark.parametrize("mode", ["off", "on"])
def test_filtered_traceback_of_a_failing_test(pytester, mode):
    """A test that fails inside a jitted function shows the same traceback frames either way."""
    pytester.makepyfile(test_tb='''
import jax, jax.numpy as jnp

def test_fails():
    @jax.jit
    def f(x):
        return x + missing  # noqa: F821
    f(jnp.ones(2))
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "--tb=short",
                                           *(["--jaxplace"] if mode == "on" else []))
    result.assert_outcomes(failed=1)
    frames = [line.strip() for line in result.stdout.lines if line.strip().startswith("test_tb.py:")]
    assert frames == ["test_tb.py:7: in test_fails", "test_tb.py:6: in f"]  # the first line is dropped
    assert "jaxplace_cli" not in result.stdout.str()


def test_jaxplace_run_of_pytest_with_warnings_as_errors(tmp_path):
    """`jaxplace run -m pytest` starts like `python -m pytest`, also where warnings are errors
    (JAX's own suite): pytest must not warn that jaxplace's already imported package cannot
    have its asserts rewritten."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (tmp_path / "test_x.py").write_text("import jax.numpy as jnp\n\ndef test_sum():\n"
                                        "    assert float(jnp.ones(3).sum()) == 3.0\n")
    args = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "test_x.py")
    plain = python(*args, cwd=tmp_path)
    rec = jaxplace("run", "--no-trace", "--quiet", "--out", tmp_path / "run", *args, cwd=tmp_path)
    assert plain.returncode == rec.returncode == 0, rec.stdout + rec.stderr
    assert "1 passed" in rec.stdout
