# Ground truth B (issue 2): a numpy batch per jit call and .item() after each.
import jax
import numpy as np

d0 = jax.devices()[0]
f = jax.jit(lambda w, x: (x @ w).sum())
w = jax.device_put(np.ones((128, 128), np.float32), d0)  # line 7: h2d 65,536 B
rng = np.random.default_rng(0)
for step in range(30):
    batch = rng.normal(size=(32, 128)).astype(np.float32)
    loss = f(w, batch)  # line 11: implicit h2d 16,384 B each
    loss.item()  # line 12: blocking d2h 4 B each
