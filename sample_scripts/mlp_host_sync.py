"""The same MLP loop written the way that costs: a fresh numpy batch and float(loss) per step.

Each step uploads the numpy batch implicitly (the jit call copies it host->device) and
``float(loss)`` makes the host wait for the device (a blocking device->host sync). Expect the
audit to flag ``implicit-h2d-in-loop`` at the step call and ``host-sync-in-loop`` at the
``float(loss)`` line.

    jaxplace run sample_scripts/mlp_host_sync.py -- --steps 50
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np


def loss_fn(params, x, y):
    (w1, b1), (w2, b2) = params
    h = jnp.tanh(x @ w1 + b1)
    return jnp.mean((h @ w2 + b2 - y) ** 2)


@jax.jit
def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--width", type=int, default=128)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    params = [(jnp.asarray(rng.normal(size=(args.width, args.width)), jnp.float32) / args.width,
               jnp.zeros(args.width)),
              (jnp.asarray(rng.normal(size=(args.width, 1)), jnp.float32) / args.width, jnp.zeros(1))]
    total = 0.0
    for i in range(args.steps):
        x = rng.normal(size=(64, args.width)).astype(np.float32)  # a new numpy batch each step
        y = x.sum(axis=1, keepdims=True)
        params, loss = step(params, x, y)
        total += float(loss)  # host waits for the device every step
    print(f"mean loss {total / args.steps:.4f}")


if __name__ == "__main__":
    main()
