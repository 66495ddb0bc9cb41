# Dispatches small ops in a loop and prints a progress counter; stops after --seconds.
# Used by the fault tests: SIGINT at random moments, os._exit, disk full, run dir removed,
# the writer process killed (also with SIGPIPE at SIG_DFL).
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
mode = sys.argv[2] if len(sys.argv) > 2 else "normal"
if mode == "sigpipe_dfl":  # as command-line tools do: a write to a closed pipe kills
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)

x = jnp.ones((16, 16))
f = jax.jit(lambda a, b: a @ b * 0.5 + 1.0)
print("ready", flush=True)
n = 0
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    x = f(x, jnp.asarray(np.full((16, 16), 0.01, np.float32)))  # 1 jit op + 1 implicit h2d
    x = x / float(x[0, 0])                                      # getitem, host read, divide
    n += 1
print(f"done {n} iterations, {float(x.sum()):.6f}", flush=True)
if mode == "os_exit":
    go = os.environ.get("BUSY_GO_FILE")  # the test says when the store holds this run's ops
    while go and not os.path.exists(go):
        time.sleep(0.01)
    os._exit(5)
