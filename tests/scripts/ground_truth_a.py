# Ground truth A (issue 2): explicit h2d, a d2d ping-pong chain, one blocking d2h.
import jax
import numpy as np

d0, d1 = jax.devices()[:2]
x = np.ones((1024, 256), np.float32)  # line 6: 1 MiB
a = jax.device_put(x, d0)  # line 7: h2d 1 MiB
b = jax.device_put(a, d1)  # line 8: d2d 1 MiB
for _ in range(4):
    b = jax.device_put(jax.device_put(b, d0) * 2, d1)  # line 10: 2 d2d per iteration
np.asarray(b)  # line 11: d2h 1 MiB, blocking
