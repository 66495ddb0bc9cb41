"""The clean twin of uncommitted_mix.py: the bias is committed to device 1 once, up front.

``jax.device_put(..., devices[1])`` moves the bias once and commits it there, so each
``w + bias`` reads it in place on device 1. Expect no ``uncommitted-copy`` finding.

    jaxplace run --devices 2 sample_scripts/uncommitted_copy_clean.py
"""
import sys

import jax
import jax.numpy as jnp

STEPS = 10


def main():
    devices = jax.devices()
    if len(devices) < 2:
        sys.exit("uncommitted_copy_clean.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    bias = jax.device_put(jnp.ones((256, 256)), devices[1])  # moved once, committed to device 1
    w = jax.device_put(jnp.zeros((256, 256)), devices[1])
    for _ in range(STEPS):
        w = w + bias  # both on device 1: no copy
    print(f"sum {float(w.sum()):.0f}")


if __name__ == "__main__":
    main()
