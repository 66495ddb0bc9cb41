"""The clean twin of imbalance_idle.py: the same 42 steps dealt round-robin to 3 devices.

Each device runs 14 steps. Expect neither ``imbalance`` nor ``idle-device``.

    jaxplace run --devices 3 sample_scripts/imbalance_clean.py
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

step = jax.jit(lambda w, x: jnp.tanh(x @ w))


def main():
    devices = jax.devices()
    if len(devices) < 3:
        sys.exit("imbalance_clean.py needs three devices: run it with `jaxplace run --devices 3 ...`")
    w = np.eye(128, dtype=np.float32)
    x = np.ones((64, 128), np.float32)
    state = [(jax.device_put(w, d), jax.device_put(x, d)) for d in devices[:3]]
    for i in range(42):
        k = i % 3  # round-robin: 14 steps per device
        wk, xk = state[k]
        state[k] = (wk, step(wk, xk))
    print("sums", [float(s.sum()) for s in jax.device_get([xk for _, xk in state])])


if __name__ == "__main__":
    main()
