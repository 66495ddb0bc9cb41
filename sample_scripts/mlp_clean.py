"""A clean jitted MLP training loop on synthetic data: the baseline jaxplace should not flag.

Data is generated on the device once, parameters stay on the device, the loss is read back
only once at the end. Expect: one small h2d per array at start-up, no transfers per step, a
single d2h at the end.

    jaxplace run sample_scripts/mlp_clean.py -- --steps 50
"""
import argparse

import jax
import jax.numpy as jnp


def init(key, sizes):
    params = []
    for din, dout in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (din, dout)) / jnp.sqrt(din), jnp.zeros(dout)))
    return params


def loss_fn(params, x, y):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return jnp.mean((x @ w + b - y) ** 2)


@jax.jit
def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)], loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--width", type=int, default=128)
    args = ap.parse_args()
    key = jax.random.PRNGKey(0)
    params = init(key, [args.width, args.width, args.width, 1])
    x = jax.random.normal(jax.random.PRNGKey(1), (256, args.width))
    y = jnp.sum(x, axis=1, keepdims=True)
    losses = []
    for _ in range(args.steps):
        params, loss = step(params, x, y)
        losses.append(loss)
    print(f"final loss {float(losses[-1]):.4f}")


if __name__ == "__main__":
    main()
