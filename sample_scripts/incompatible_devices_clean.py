"""The clean twin of incompatible_devices.py: the batches go to the parameters' device.

    jaxplace run --devices 2 sample_scripts/incompatible_devices_clean.py
"""
import sys

import jax
import numpy as np


@jax.jit
def predict(params, batch):
    return batch @ params


def load_batch(i, device):
    return jax.device_put(np.full((32, 256), i, np.float32), device)


def main():
    devices = jax.devices()
    if len(devices) < 2:
        sys.exit("incompatible_devices_clean.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    params = jax.device_put(np.ones((256, 10), np.float32) / 256, devices[0])
    for i in range(3):
        logits = predict(params, load_batch(i, params.device))  # the batch follows the params
        print(f"batch {i}: {float(logits.sum()):.1f}")


if __name__ == "__main__":
    main()
