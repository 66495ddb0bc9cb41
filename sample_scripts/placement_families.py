"""Op families on chosen devices, without editing the code: the placement people ask JAX for.

Run it under one of the policies in sample_scripts/policies/ (4 simulated devices):

    jaxplace run --devices 4 --policy sample_scripts/policies/matmul_transpose_rest.toml \\
        sample_scripts/placement_families.py
    jaxplace run --devices 4 --policy sample_scripts/policies/families.toml \\
        --on-policy-error fallback sample_scripts/placement_families.py

The script does a matmul, a transpose, an add, a sort and a cumulative sum (a scan) eagerly
and prints a checksum that is the same under every policy.
"""
import jax.numpy as jnp
import numpy as np

a = jnp.asarray(np.arange(64, dtype=np.float32).reshape(8, 8) / 64)
b = a @ a                      # matmul  (dot_general)
c = jnp.transpose(b)           # transpose
d = c + a                      # add
e = jnp.sort(d, axis=1)        # sort
f = jnp.cumsum(e, axis=0)      # cumsum
print(f"checksum {float(jnp.sum(f)):.4f}")
