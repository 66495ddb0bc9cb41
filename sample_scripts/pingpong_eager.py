"""Eager code that bounces an array between two devices: the ping-pong jaxplace exists to find.

The array is moved to device 0, multiplied there, and moved back to device 1 on every
iteration, so 1 MiB crosses between the devices twice per iteration. Needs two devices:

    jaxplace run --devices 2 sample_scripts/pingpong_eager.py
"""
import sys

import jax
import numpy as np

ITERATIONS = 4


def main():
    devices = jax.devices()
    if len(devices) < 2:
        sys.exit("pingpong_eager.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    d0, d1 = devices[:2]
    x = np.ones((1024, 256), np.float32)  # 1 MiB
    a = jax.device_put(x, d0)
    b = jax.device_put(a, d1)
    for _ in range(ITERATIONS):
        b = jax.device_put(jax.device_put(b, d0) * 2, d1)
    result = np.asarray(b)
    print(f"value {result[0, 0]:.0f} on {b.devices()}")


if __name__ == "__main__":
    main()
