"""Parameters committed to one device, batches committed to another: JAX refuses the call.

``params`` is put on device 0; the data pipeline puts each batch on device 1. Both arrays are
*committed*, so ``predict(params, batch)`` raises "Received incompatible devices for jitted
computation" — and JAX's message does not say where either array came from. Expect
``incompatible-devices`` naming both arguments, where each was created and committed. The
script dies on the first call (exit code 1), as it would under plain python.

    jaxplace run --devices 2 sample_scripts/incompatible_devices.py
"""
import sys

import jax
import numpy as np


@jax.jit
def predict(params, batch):
    return batch @ params


def load_batch(i, device):
    return jax.device_put(np.full((32, 256), i, np.float32), device)  # the batch is committed here


def main():
    devices = jax.devices()
    if len(devices) < 2:
        sys.exit("incompatible_devices.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    params = jax.device_put(np.ones((256, 10), np.float32) / 256, devices[0])  # committed to device 0
    for i in range(3):
        logits = predict(params, load_batch(i, devices[1]))
        print(f"batch {i}: {float(logits.sum()):.1f}")


if __name__ == "__main__":
    main()
