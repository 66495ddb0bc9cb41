"""An uncommitted array mixed with a committed one in a loop: a silent copy on every call.

``bias`` is created without a device, so it is *uncommitted* and lives on the default device
(device 0). ``w`` is committed to device 1. Each ``w + bias`` runs on device 1 and copies
``bias`` over again — it never moves, so the copy repeats. Expect ``uncommitted-copy``.

    jaxplace run --devices 2 sample_scripts/uncommitted_mix.py
"""
import sys

import jax
import jax.numpy as jnp

STEPS = 10


def main():
    devices = jax.devices()
    if len(devices) < 2:
        sys.exit("uncommitted_mix.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    bias = jnp.ones((256, 256))  # uncommitted, on the default device
    w = jax.device_put(jnp.zeros((256, 256)), devices[1])  # committed to device 1
    for _ in range(STEPS):
        w = w + bias  # runs on device 1; bias is copied from device 0 each time
    print(f"sum {float(w.sum()):.0f}")


if __name__ == "__main__":
    main()
