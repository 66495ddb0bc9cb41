# Records some work, then waits to be interrupted (the test sends SIGINT or SIGTERM).
import sys
import time

import jax.numpy as jnp

x = jnp.ones((64, 64))
for _ in range(20):
    x = x @ x * 0.01
print("ready", flush=True)
sys.stdout.flush()
while True:
    x = x + 1.0
    time.sleep(0.01)
