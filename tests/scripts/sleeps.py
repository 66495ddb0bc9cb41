# Records some work, then waits to be interrupted (the test sends SIGINT or SIGTERM).
# --atexit: a handler that takes 0.5 s (a checkpoint saved on the way out), then says so.
import atexit
import sys
import time

import jax.numpy as jnp

if "--atexit" in sys.argv:
    atexit.register(lambda: (time.sleep(0.5), print("atexit done", flush=True)))
x = jnp.ones((64, 64))
for _ in range(20):
    x = x @ x * 0.01
print("ready", flush=True)
sys.stdout.flush()
while True:
    x = x + 1.0
    time.sleep(0.01)
