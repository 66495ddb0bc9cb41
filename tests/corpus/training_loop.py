"""Fidelity corpus: a flax-style training loop without flax (params and optimizer state as
pytrees, a jitted train step, an evaluation helper called twice per step, a logger).

    python training_loop.py           # clean: no host-sync-in-loop warning
    python training_loop.py --sync    # float(loss) right after every step: the classic stall

Expected, by hand (x64 off, 200 steps of a 16 x 32 float32 batch):
* h2d: per step jax.device_put of x (16 x 32 x 4 = 2,048 B) and y (16 x 1 x 4 = 64 B):
  200 x 2,112 = 422,400 B in 400 transfers;
* d2h, all 4 B: the logger reads the previous step's loss 199 times (later work is queued
  behind it: not blocking), the evaluation is printed every 50 steps (4 blocking reads, 1 in
  50 steps: not "in the loop"), and the final print reads the last loss and eval_a (2, not
  blocking; eval_b was read at step 199 already); --sync adds 200 blocking float(loss);
* steps: jit(train_step), 200 (the evaluation helper is called twice as often).
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 200
SYNC = "--sync" in sys.argv[1:]


def init(key):
    k1, k2 = jax.random.split(key)
    return {"dense1": {"w": jax.random.normal(k1, (32, 64)) * 0.1, "b": jnp.zeros(64)},
            "dense2": {"w": jax.random.normal(k2, (64, 1)) * 0.1, "b": jnp.zeros(1)}}


def apply(params, x):
    h = jnp.tanh(x @ params["dense1"]["w"] + params["dense1"]["b"])
    return h @ params["dense2"]["w"] + params["dense2"]["b"]


def loss_fn(params, x, y):
    return jnp.mean((apply(params, x) - y) ** 2)


@jax.jit
def train_step(params, momentum, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, momentum, grads)
    params = jax.tree.map(lambda p, m: p - 0.01 * m, params, momentum)
    return params, momentum, loss


@jax.jit
def evaluate(params, x, y):
    return loss_fn(params, x, y)


rng = np.random.default_rng(0)
xs = rng.standard_normal((STEPS, 16, 32)).astype(np.float32)
ys = (xs.sum(axis=2, keepdims=True) * 0.1).astype(np.float32)
params = init(jax.random.key(0))
momentum = jax.tree.map(jnp.zeros_like, params)
history, prev = [], None
for step in range(STEPS):
    x, y = jax.device_put(xs[step]), jax.device_put(ys[step])
    params, momentum, loss = train_step(params, momentum, x, y)
    if SYNC:
        history.append(float(loss))
    eval_a = evaluate(params, x, y)
    eval_b = evaluate(params, x, jnp.zeros_like(y))
    if prev is not None and not SYNC:
        history.append(float(prev))  # the previous step's loss: already computed
    prev = loss
    if step % 50 == 49:
        print(f"step {step + 1} eval {float(eval_b):.4f}")
print({k: round(float(v), 4) for k, v in {"loss": loss, "eval_a": eval_a, "eval_b": eval_b}.items()})
print(f"logged {len(history)} losses, first {history[0]:.4f}")
