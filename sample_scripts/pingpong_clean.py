"""The clean twin of pingpong_eager.py: the same work, with the data moved once and left there.

The array goes to device 0 once, is multiplied there on every iteration, and is read back at
the end: 1 MiB crosses between devices once, never back. Expect no ``pingpong`` finding.

    jaxplace run --devices 2 sample_scripts/pingpong_clean.py
"""
import sys

import jax
import numpy as np

ITERATIONS = 4


def main():
    devices = jax.devices()
    if len(devices) < 2:
        sys.exit("pingpong_clean.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    d0, d1 = devices[:2]
    x = np.ones((1024, 256), np.float32)  # 1 MiB
    b = jax.device_put(x, d1)
    a = jax.device_put(b, d0)  # moved once ...
    for _ in range(ITERATIONS):
        a = a * 2  # ... and every iteration stays on device 0
    result = np.asarray(a)
    print(f"value {result[0, 0]:.0f} on {a.devices()}")


if __name__ == "__main__":
    main()
