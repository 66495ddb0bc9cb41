"""Independent trials (a hyper-parameter sweep) spread over devices by a round-robin placer.

    jaxplace run --devices 4 --policy rr sample_scripts/placement_trials.py
    jaxplace run --devices 4 --policy sample_scripts/policies/placers.py:RoundRobinPlacer \\
        sample_scripts/placement_trials.py
    jaxplace run --devices 4 --policy rr-strict sample_scripts/placement_trials.py   # the naive cost

Each trial starts from host data, so ``rr`` sends it to the next device and keeps all its
later work there; ``rr-strict`` moves every op to the next device and pays in d2d copies.
"""
import jax
import jax.numpy as jnp
import numpy as np

update = jax.jit(lambda w: w - 0.1 * jnp.tanh(w))
results = []
for t in range(8):
    w = jnp.asarray(np.full((64, 64), t, np.float32))
    for _ in range(4):
        w = update(w)
    results.append(w)
print("sums", [round(float(jnp.sum(r)), 3) for r in results])
