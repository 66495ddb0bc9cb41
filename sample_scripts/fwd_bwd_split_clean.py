"""The clean twin of fwd_bwd_split.py: the backward pass runs where the forward ran.

The vjp function and the cotangent stay on device 0, so the residuals are read in place.
Only the per-step gradient sum goes to device 1 (a scalar). Expect no ``fwd-bwd-split``.

    jaxplace run --devices 2 sample_scripts/fwd_bwd_split_clean.py
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
        sys.exit("fwd_bwd_split_clean.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    d0, d1 = devices[:2]
    w = jax.device_put(jnp.full((64, 64), 0.01), d0)
    x = jax.device_put(jnp.ones((32, 64)), d0)
    total = jax.device_put(jnp.zeros(()), d1)
    for _ in range(STEPS):
        value, vjp = jax.vjp(loss, w, x)  # forward on device 0
        gw, gx = vjp(jnp.ones(()))  # backward on device 0 too: the residuals stay put
        total = total + jax.device_put(jnp.sum(gw), d1)
    print(f"gradient sum {float(total):.4f}")


if __name__ == "__main__":
    main()
