"""Issue 24 item 7: ``suggest --verify`` on small library-style programs.

The prediction ``--verify`` checks is the run's own measurement changed only where the policy
changes something (``suggest.predict.expected``): transfers the script makes under any
placement (an explicit replicated ``device_put``) are carried over exactly, and a program whose
placement is already optimal gets 0 rules and a prediction equal to the measurement.
Each program is recorded with ``jaxplace run --devices 2`` and verified by a real replay.
"""
from __future__ import annotations

import json
import textwrap

import pytest
from conftest import jaxplace

# XLA compiles are most of these children's CPU; nothing here depends on them (conftest.py)
pytestmark = pytest.mark.compile_cache

OPTAX_LOOP = """\
import jax, jax.numpy as jnp
import optax

def loss(w, x, y):
    return jnp.mean((x @ w - y) ** 2)

opt = optax.adam(1e-2)
w = jnp.zeros((16, 1))
state = opt.init(w)
x = jnp.ones((64, 16))
y = jnp.ones((64, 1))

@jax.jit
def step(w, state):
    g = jax.grad(loss)(w, x, y)
    u, state = opt.update(g, state, w)
    return optax.apply_updates(w, u), state

for _ in range(5):
    w, state = step(w, state)
print(round(float(loss(w, x, y)), 4))
"""

REPLICATED = """\
import jax, jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:2]), ("d",))
w = jax.device_put(jnp.ones((128, 128)), NamedSharding(mesh, P()))  # replicated: a leg to cpu:1

@jax.jit
def f(w, x):
    return jnp.tanh(x @ w)

x = jnp.ones((8, 128))
for _ in range(3):
    x = f(w, x)
print(float(x.sum()))
"""


@pytest.mark.parametrize("name,source", [("optax_loop", OPTAX_LOOP), ("replicated", REPLICATED)])
def test_verify_passes_on_an_optimal_placement(tmp_path, name, source):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    proc = jaxplace("run", "--devices", 2, "--no-trace", "--quiet", "--out", tmp_path / "run",
                    f"{name}.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = jaxplace("suggest", tmp_path / "run", "-o", tmp_path / "p.toml", "--verify", f"{name}.py",
                    "--verify-out", tmp_path / "replay", "--format", "json", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    v = doc["verification"]
    assert v["ok"] and v["match"], (doc["recorded"], doc["expected"], v)
    assert proc.returncode == 0, proc.stderr
    rules = [line for line in (tmp_path / "p.toml").read_text().splitlines() if line.startswith("[[rule]]")]
    assert rules == []
