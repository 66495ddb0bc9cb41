"""The recording starts however the script comes to import JAX. It hooks the first ``import jax``
without importing JAX itself (capture/import_hook.py); an is-it-installed check before it
(``importlib.util.find_spec("jax")``, as transformers' ``is_flax_available`` makes) used the hook
up, and the run recorded nothing without a word."""
import pytest
from conftest import audit_json, jaxplace, python

BODY = "import jax.numpy as jnp\nprint(float((jnp.ones(3) * 2).sum()))\n"
BEFORE = {
    "find_spec": "import importlib.util\nprint(importlib.util.find_spec('jax') is not None)\nimportlib.util.find_spec('jax')\n",
    "manual_import": ("import importlib.util, sys\nspec = importlib.util.find_spec('jax')\n"
                      "mod = importlib.util.module_from_spec(spec)\nsys.modules['jax'] = mod\n"
                      "spec.loader.exec_module(mod)\n"),
}


@pytest.mark.parametrize("case", sorted(BEFORE))
def test_jax_looked_up_before_its_import_is_still_recorded(tmp_path, case):
    """Counted by hand: jnp.ones(3) uploads its fill value (4 B), `* 2` the 2 (4 B), float() reads 4 B."""
    script = tmp_path / "s.py"
    script.write_text(BEFORE[case] + BODY)
    jp = jaxplace("run", "-q", "--no-trace", "--out", tmp_path / "r", script)
    assert (jp.returncode, jp.stdout) == (0, ("True\n" if case == "find_spec" else "") + "6.0\n"), jp.stderr
    totals = audit_json(tmp_path / "r", "--min-bytes", "0")["transfers"]["totals"]
    assert (totals["h2d"]["count"], totals["h2d"]["bytes"], totals["d2h"]["count"], totals["d2h"]["bytes"]) == (2, 8, 1, 4)


def test_an_in_process_recording_leaves_no_wrapper_behind(tmp_path):
    """The pytest plugin and IPython record in the user's process and uninstall after: a jax
    module first imported meanwhile (jax.scipy.*) binds some functions by value from where the
    hooks had put wrappers (`from jax._src.ops.special import logsumexp`); 21 stayed wrappers
    after the recording, and jax.scipy.special.logsumexp then failed to pickle."""
    from conftest import REPO

    script = tmp_path / "inproc.py"
    script.write_text(
        f"import pickle, sys\nsys.path.insert(0, {str(REPO / 'tests')!r})\nimport jax\nfrom inprocess import recorded\n"
        "with recorded():\n    import jax.scipy.special, jax.scipy.stats\n"
        "left = [f'{n}.{k}' for n, m in list(sys.modules.items()) if m is not None and n.startswith('jax')\n"
        "        for k, v in list(vars(m).items()) if getattr(v, '__jaxplace_original__', None) is not None]\n"
        "print(left, pickle.loads(pickle.dumps(jax.scipy.special.logsumexp)) is jax.nn.logsumexp)\n")
    r = python(script)
    assert (r.returncode, r.stdout) == (0, "[] True\n"), r.stderr[-2000:]
