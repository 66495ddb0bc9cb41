"""flax.linen as its docs show it, fed by a NumPy loader, and the JAX calls around it whose
uploads jaxplace once missed or invented (the guard is the oracle: tests/test_library_corpus.py):

- eager ``init``/``apply`` on NumPy input: flax's ``promote_dtype`` calls ``jnp.asarray(x, dtype)``,
  which JAX uploads with ``device_put`` (not as a dispatch argument), as does a loader's
  ``jnp.asarray(batch, dtype=jnp.float32)`` and ``jnp.full`` with an array fill value;
- typed PRNG keys indexed (``keys[i]``, ``keys[1:]``) and an eager ``lax.slice``: their start
  indices are uploaded;
- a jitted function with a NumPy argument it does not use, and one under ``jax.grad`` whose
  backward pass gets a constant it does not use: JAX drops them and uploads nothing; whether
  one is used depends on the call's argument structure and shapes (a tuple one shorter, a 2-d
  argument), and a negative ``static_argnums`` names an argument that is never uploaded.
"""
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

rng = np.random.default_rng(0)
model = nn.Dense(3)
x0 = rng.standard_normal((4, 5)).astype(np.float32)
params = model.init(jax.random.key(0), x0)
print(model.apply(params, x0).shape)

tx = optax.sgd(0.1)
opt_state = tx.init(params)
keys = jax.random.split(jax.random.key(1), 3)


@jax.jit
def step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
    updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss


for i in range(3):
    batch = jnp.asarray(rng.standard_normal((4, 5)).astype(np.float32), dtype=jnp.float32)
    target = jax.random.normal(keys[i], (4, 3))
    params, opt_state, loss = step(params, opt_state, batch, target)
print(round(float(loss), 3), keys[1:].shape)

fill = jnp.full((2, 3), np.array([1.0, 2.0, 3.0], np.float32), dtype=jnp.float32)
window = jax.lax.slice(jnp.arange(10.0), (2,), (5,))
c = np.array([1.0, 0.5], np.float32)
print(float(jax.jit(lambda k, unused: k * 2.0)(jnp.asarray(0.5), c)))
print(float(jax.grad(jax.jit(lambda k: (k * c).sum() + c.sum()))(jnp.asarray(0.5))), fill.sum(), window)


@jax.jit
def last(x, t):
    return x + t[-1]


@jax.jit
def branch(x, y):
    return x + y if x.ndim > 1 else x * 2


@partial(jax.jit, static_argnums=-2)
def scaled(a, n, y):
    return a * n + y


v, w = np.ones(3, np.float32), np.full(3, 2.0, np.float32)
ones = jnp.ones(3)
last(ones, (v, w))
for _ in range(3):
    last(ones, (w,))
branch(v, w)
branch(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
print(scaled(jnp.ones(3), 3, v))
