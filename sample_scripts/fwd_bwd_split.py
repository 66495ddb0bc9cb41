"""A backward pass on another device than its forward pass: every step ships the residuals.

The forward pass (``jax.vjp``) runs on device 0. Like a naive two-stage pipeline, the vjp
function — which holds the forward's residuals: inputs and intermediates — is sent to device 1
and the backward pass runs there, so every step copies all residuals across. Expect
``fwd-bwd-split`` at the backward call with the residual bytes per step x steps.

    jaxplace run --devices 2 sample_scripts/fwd_bwd_split.py
"""
import sys

import jax
import jax.numpy as jnp

STEPS = 3


def loss(w, x):
    h = jnp.tanh(x @ w)
    return jnp.sum(h * h)


def main():
    devices = jax.devices()
    if len(devices) < 2:
        sys.exit("fwd_bwd_split.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    d0, d1 = devices[:2]
    w = jax.device_put(jnp.full((64, 64), 0.01), d0)
    x = jax.device_put(jnp.ones((32, 64)), d0)
    total = jax.device_put(jnp.zeros(()), d1)
    for _ in range(STEPS):
        value, vjp = jax.vjp(loss, w, x)  # forward on device 0
        vjp = jax.device_put(vjp, d1)  # the residuals go to device 1 ...
        gw, gx = vjp(jax.device_put(jnp.ones(()), d1))  # ... and the backward pass runs there
        total = total + jnp.sum(gw)
    moved = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(vjp))
    print(f"residual bytes per step {moved}; gradient sum {float(total):.4f}")


if __name__ == "__main__":
    main()
