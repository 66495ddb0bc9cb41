"""Model-parallel layer placement: layer i of an N-layer MLP on device i mod 4.

    jaxplace run --devices 4 --policy sample_scripts/policies/placers.py:layer_placer \\
        sample_scripts/placement_layers.py

All layers run at the same source line, so the policy tells them apart by ``occurrence``
(the n-th matmul at that line): layer i is occurrence i of each forward pass.
"""
import jax.numpy as jnp
import numpy as np

N_LAYERS = 6
rng = np.random.default_rng(0)
params = [jnp.asarray(rng.normal(size=(32, 32)).astype(np.float32) / 6) for _ in range(N_LAYERS)]
x = jnp.ones((16, 32))
for w in params:
    x = jnp.tanh(x @ w)  # one matmul per layer
print(f"output {float(jnp.sum(x)):.5f}")
