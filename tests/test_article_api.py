"""The article's placement API as written (issue 14): its snippets, rewritten for simulated CPU
devices as sample_scripts/article_*.py, place every op as the article says — under
``jaxplace run`` (checked on the recorded ops) and under plain python with
``jaxplace_cli.install_jax_alias()`` (checked on what the script prints: ``where()`` of each
result). Both runs print the same thing.
"""
from __future__ import annotations

import sqlite3
import warnings

import pytest
from conftest import SAMPLES, child_env, python


def line_of(script: str, text: str) -> int:
    """The 1-based line of ``script`` holding ``text`` (exactly one)."""
    lines = [i + 1 for i, x in enumerate((SAMPLES / f"{script}.py").read_text().splitlines()) if text in x]
    assert len(lines) == 1, (script, text, lines)
    return lines[0]


def _expected(script):
    """(devices, lines the script prints first, every recorded op as (line, name, device))."""
    L = lambda text: line_of(script, text)  # noqa: E731
    return EXPECTED[script](L)


EXPECTED = {
    # ones -> the third device; a.T -> the second; a @ a.T -> the first; b.T -> the second
    "article_custom_placement": lambda L: (3, ["a cpu:2 a.T cpu:1 a @ a.T cpu:0 b.T cpu:1"], [
        (L("a = jnp.ones"), "ones", "cpu:2"), (L("at = a.T"), "transpose", "cpu:1"),
        (L("b = a @ at"), "matmul", "cpu:0"), (L("c = b.T"), "transpose", "cpu:1")]),
    # the data is made outside the block (JAX: cpu:0); three calls cycle 0, 1, 0
    "article_round_robin": lambda L: (2, ["placed ['cpu:0', 'cpu:1', 'cpu:0'] asked about "
                                  "['jit(heavy_computation)', 'jit(heavy_computation)', 'jit(heavy_computation)']"], [
        *[(L("data1, data2, data3 ="), "full", "cpu:0")] * 3,
        (L("result1 = heavy"), "jit(heavy_computation)", "cpu:0"),
        (L("result2 = heavy"), "jit(heavy_computation)", "cpu:1"),
        (L("result3 = heavy"), "jit(heavy_computation)", "cpu:0"),
        (L("host = jax.device_get"), "device_get", "cpu:0,cpu:1")]),
    # float16 ones/transpose/matmul -> the accelerator (cpu:1); the float32 sum -> the host
    "article_mixed_precision": lambda L: (2, ["a cpu:1 a @ a.T cpu:1 float16 sum cpu:0 float32"], [
        (L("a = jnp.ones"), "ones", "cpu:1"), (L("b = a @ a.T"), "transpose", "cpu:1"),
        (L("b = a @ a.T"), "matmul", "cpu:1"), (L("c = jnp.sum"), "sum", "cpu:0")]),
    # every op on the second device, and the callback says so
    "article_check_placement": lambda L: (2, ["Array on cpu:1"], [(L("a = jnp.ones(3)"), "ones", "cpu:1")]),
    # conv/matmul -> "TPU" cpu:0, sort/argsort/cumsum -> "GPU" cpu:1, the rest -> "CPU" cpu:2
    "article_hetero_placement": lambda L: (3, ["conv cpu:0 matmul cpu:0 sort cpu:1 argsort cpu:1 cumsum cpu:1 tanh cpu:2"], [
        (L("signal = jnp.linspace"), "linspace", "cpu:2"),
        (L("smooth = jnp.convolve"), "ones", "cpu:2"), (L("smooth = jnp.convolve"), "true_divide", "cpu:2"),
        (L("smooth = jnp.convolve"), "convolve", "cpu:0"),
        *[(L("gram = signal.reshape"), "reshape", "cpu:2")] * 2, (L("gram = signal.reshape"), "matmul", "cpu:0"),
        (L("ranked = jnp.sort"), "sort", "cpu:1"), (L("order = jnp.argsort"), "argsort", "cpu:1"),
        (L("running = jnp.cumsum"), "cumsum", "cpu:1"), (L("squashed = jnp.tanh"), "tanh", "cpu:2"),
        (L("g, o, q = jax.device_get"), "device_get", "cpu:0,cpu:1,cpu:2")]),
}


ARTICLE = sorted(p.stem for p in SAMPLES.glob("article_*.py"))


def test_every_article_script_is_checked():
    assert ARTICLE == ["article_check_placement", "article_custom_placement", "article_hetero_placement",
                       "article_mixed_precision", "article_round_robin"]


def _recorded_ops(run_dir) -> list[tuple]:
    with sqlite3.connect(run_dir / "events.sqlite") as c:
        lines = dict(c.execute("SELECT id, line FROM sites"))
        return [(lines[site], name, dev) for name, dev, site in
                c.execute("SELECT name, devices, site FROM ops ORDER BY seq")]


@pytest.mark.slow
@pytest.mark.parametrize("script", ARTICLE)
def test_article_snippet_places_every_op_as_the_article_says(script, sample_run):
    devices, printed, ops = _expected(script)
    env = child_env(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    plain = python(SAMPLES / f"{script}.py", env=env)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[:len(printed)] == printed
    rec = sample_run(script, devices=devices)  # the dogfood's recording too (once per session)
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout == plain.stdout  # jaxplace run and python with device_placement agree
    assert _recorded_ops(rec.run) == ops


def test_plain_jax_cannot_run_the_check_placement_snippet():
    """Why the debug-callback hook exists: without jaxplace, the article's check raises in the
    callback (``device`` is a property) and would see cpu:0 anyway."""
    import jax
    import jax.numpy as jnp

    seen = []
    jax.debug.callback(lambda x: seen.append(x.device), jax.device_put(jnp.ones(3), jax.devices()[1]))
    jax.effects_barrier()
    assert [str(d) for d in seen] == ["cpu:0"] and not callable(seen[0])


# -- the op names a policy compares ------------------------------------------------------------

def test_op_name_matches_every_spelling_and_family():
    from jaxplace_cli.placement.opinfo import OpInfo, OpName

    matmul = OpName("dot_general", "matmul")
    assert matmul == "matmul" and matmul == "dot_general" and "matmul" == matmul and matmul == "einsum"
    assert matmul in ["conv", "matmul"] and matmul not in ["sort", "scan"] and matmul != "add"
    assert matmul.name == "matmul" and str(matmul) == "dot_general" and matmul in {"dot_general"}
    assert OpName("transpose", "transpose") == "transpose" and OpName("transpose", "swapaxes") == "transpose"
    assert OpName("conv_general_dilated", "convolve") in ["conv", "matmul"]
    assert OpName("sort", "argsort") in ["sort", "scan"] and OpName("cumsum", "cumsum") in ["sort", "scan"]
    # an accumulation is an add (the article's mixed precision policy); an add is not a sum
    assert OpName("reduce_sum", "sum") == "add" and OpName("add", "add") != "sum"
    assert OpName("tanh", "tanh") not in ["conv", "matmul", "sort", "scan", "add"]
    import pickle

    assert pickle.loads(pickle.dumps(matmul)) == "matmul"
    info = OpInfo("dot_general", "method", raw_name="matmul", dtypes=["float16"], extra={"dtype": "float32"})
    assert info.name == "matmul" and info.dtype == "float32"  # the dtype it computes in


def test_policies_bind_the_article_signatures():
    from functools import partial

    from jaxplace_cli.placement.opinfo import OpInfo
    from jaxplace_cli.placement.policies import load_policy

    def mixed_precision_placement(op, dtype, shape):
        return f"{op.name}:{dtype}:{shape}"

    class RoundRobinPlacer:
        def __init__(self):
            self.n = 0

        def __call__(self, op, *args):
            self.n += 1
            return (op == "matmul", len(args), self.n)

    info = OpInfo("dot_general", "method", args=(1, 2), shapes=[(4, 4)], dtypes=["float16"], raw_name="matmul")
    assert load_policy(partial(mixed_precision_placement)).decide(info) == "matmul:float16:(4, 4)"
    placer = load_policy(RoundRobinPlacer())
    assert [placer.decide(info), placer.decide(info)] == [(True, 2, 1), (True, 2, 2)]


# -- jax.device_placement and jit functions made before the hooks -----------------------------

def test_install_jax_alias_never_replaces_a_jax_attribute(monkeypatch):
    import jax

    import jaxplace_cli

    sentinel = object()
    monkeypatch.setattr(jax, "device_placement", sentinel, raising=False)
    jaxplace_cli.install_jax_alias()
    assert jax.device_placement is sentinel
    monkeypatch.delattr(jax, "device_placement")
    jaxplace_cli.install_jax_alias()
    assert jax.device_placement is jaxplace_cli.device_placement


LOCAL_JIT = '''
import warnings
import jax, jax.numpy as jnp
from jaxplace_cli import device_placement, where

@jax.jit
def module_level(x):
    return x * 2

def main():
    local = jax.jit(lambda x: x + 1)   # made before the hooks, held in a local
    x = jnp.ones(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with device_placement("pin:cpu:1"):
                a, b = module_level(x), local(x)
    print(where(a), where(b), len(caught), caught[0].category.__name__ if caught else "")
    print("restored", type(module_level).__name__)

main()
'''


def test_device_placement_places_module_jits_and_warns_once_about_local_ones(tmp_path):
    script = tmp_path / "local_jit.py"
    script.write_text(LOCAL_JIT)
    proc = python(script, env=child_env(XLA_FLAGS="--xla_force_host_platform_device_count=2"))
    assert proc.returncode == 0, proc.stderr
    # the module-level jit is placed on cpu:1; the local one runs where JAX decides (cpu:0),
    # and the one warning (of two entries) says why; afterwards the module global is JAX's again
    assert proc.stdout.splitlines() == ["cpu:1 cpu:0 1 PlacementWarning", "restored PjitFunction"]


def test_debug_callback_without_a_placement_is_jax_own():
    """No placement active: jax.debug.callback is JAX's function, the callback gets JAX's array."""
    import jax
    import jax.numpy as jnp

    from jaxplace_cli.capture.recorder import Recorder
    from jaxplace_cli.capture.recording import Recording

    with Recording(Recorder(maxlen=100)):
        got = []
        with warnings.catch_warnings():
            jax.debug.callback(lambda x: got.append(type(x).__name__), jnp.ones(2))
            jax.effects_barrier()
    assert got == ["ArrayImpl"]
