"""Fixed costs of a run (issue 29 item 2): hooks for modules the script has not imported are
installed when it imports them, not by importing them at install."""
import subprocess
import sys

from conftest import REPO, child_env

SCRIPT = r"""
import sys
sys.path[:0] = sys.argv[1:3]  # this checkout's tests/ and package, whatever is installed
import jax.numpy as jnp
from inprocess import recorded

with recorded() as r:
    assert "jax.scipy.linalg" not in sys.modules, "imported by the hooks' install"
    import jax.scipy.linalg as sl
    assert sl.solve.__jaxplace_original__ is not None
    sl.solve(jnp.eye(2), jnp.ones(2))
print([o.name for o in r.ops])
assert getattr(sl.solve, "__jaxplace_original__", None) is None  # uninstalled with the others
with recorded() as r2:  # installed again: now wrapped at install (the module is there)
    sl.solve(jnp.eye(2), jnp.ones(2))
print([o.name for o in r2.ops])
"""


def test_jax_scipy_is_hooked_when_the_script_imports_it(tmp_path):
    script = tmp_path / "lazy.py"
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(REPO / "tests"), str(REPO)], env=child_env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    first, second = r.stdout.splitlines()[-2:]
    assert first == "['eye', 'ones', 'scipy.linalg.solve']"
    assert second == first
