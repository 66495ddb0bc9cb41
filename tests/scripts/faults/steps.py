# N steps of known cost (issue 25's ground truth): `x + 1` is 1 op and 1 h2d (the scalar),
# `float(y[0])` is 1 op (getitem), 1 h2d (the index) and 1 d2h. The setup's `jnp.ones` is 1 op
# and 1 h2d leg (its fill value, as JAX's transfer guard logs it): ops = 2 N + 1, transfers = 3 N + 1. N = 0: steps until a signal ends the script.
#   argv: N [mode] — mode "plain", "handler" (installs its own handler for SIG in argv[3]),
#   "clock:PATH" (each step's end time, CLOCK_MONOTONIC ns, into a ring in a shared file)
import mmap
import signal
import struct
import sys
import time

import jax.numpy as jnp

n = int(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "plain"
ring = None
RING = 1 << 16
if mode == "clock":
    with open(sys.argv[3], "r+b") as f:
        ring = mmap.mmap(f.fileno(), 8 * (RING + 1))
elif mode == "handler":
    def handler(signum, frame):
        print(f"handled {signal.Signals(signum).name}", flush=True)
        sys.exit(7)

    signal.signal(getattr(signal, sys.argv[3]), handler)

x = jnp.ones(4)
k = 0
if ring is not None:
    struct.pack_into("<q", ring, 8, time.monotonic_ns())  # "step 0" ends here
while n == 0 or k < n:
    y = x + 1
    v = float(y[0])
    k += 1
    if ring is not None:
        struct.pack_into("<q", ring, 8 * (1 + k % RING), time.monotonic_ns())  # step k ended
        struct.pack_into("<q", ring, 0, k)
    if k == 1:
        print("ready", flush=True)
print("done", k, flush=True)
