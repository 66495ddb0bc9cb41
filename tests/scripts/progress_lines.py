"""Numbered lines printed while ops and uploads are dispatched, slowly enough for jaxplace's
live status line to be redrawn between them (issue 16 tests)."""
import sys
import time

import jax.numpy as jnp
import numpy as np

LINES = 30


def main():
    x = jnp.ones((64, 64), jnp.float32)
    for i in range(LINES):
        x = x + np.ones((64, 64), np.float32)  # a numpy operand: a 16 KiB upload
        print(f"line {i}", flush=True)
        time.sleep(0.05)
    print("done", float(x[0, 0]), file=sys.stderr)


if __name__ == "__main__":
    main()
