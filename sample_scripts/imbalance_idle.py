"""Three devices, one does nearly all the work: device 1 is barely used, device 2 never.

40 steps run on device 0 and 2 on device 1; device 2 gets nothing. Expect ``imbalance``
(device 0's op time is many times device 1's) and ``idle-device`` (cpu:2 ran no ops).

    jaxplace run --devices 3 sample_scripts/imbalance_idle.py
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

step = jax.jit(lambda w, x: jnp.tanh(x @ w))


def main():
    devices = jax.devices()
    if len(devices) < 3:
        sys.exit("imbalance_idle.py needs three devices: run it with `jaxplace run --devices 3 ...`")
    w = np.eye(128, dtype=np.float32)
    x = np.ones((64, 128), np.float32)
    w0, x0 = jax.device_put(w, devices[0]), jax.device_put(x, devices[0])
    w1, x1 = jax.device_put(w, devices[1]), jax.device_put(x, devices[1])
    for _ in range(40):
        x0 = step(w0, x0)  # device 0: 40 steps
    for _ in range(2):
        x1 = step(w1, x1)  # device 1: 2 steps; device 2: none
    print(f"sums {np.asarray(x0).sum():.1f} {np.asarray(x1).sum():.1f}")


if __name__ == "__main__":
    main()
