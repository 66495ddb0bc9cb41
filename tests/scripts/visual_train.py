"""A small training loop on two devices with hand-countable transfers (issue 16 tests).

    jaxplace run --devices 2 tests/scripts/visual_train.py

- line 22: 1 explicit h2d of 256 KiB (the weights);
- line 25: 1 implicit h2d of 256 KiB per step (a numpy argument of the jit call): STEPS;
- line 26: 1 d2d of 256 KiB; line 27: 1 blocking d2h of 256 KiB.
"""
import jax
import numpy as np

STEPS = 4


@jax.jit
def step(w, x):
    return w * 0.5 + x


def main():
    d0, d1 = jax.devices()[:2]
    w = jax.device_put(np.ones((256, 256), np.float32), d0)
    for i in range(STEPS):
        x = np.full((256, 256), i, np.float32)
        w = step(w, x)
    w1 = jax.device_put(w, d1)
    print("sum", float(np.asarray(w1).sum()))


if __name__ == "__main__":
    main()
