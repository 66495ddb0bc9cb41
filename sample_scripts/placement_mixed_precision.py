"""Mixed precision placed by dtype: float16 matmuls on the accelerator, float32 reductions on the CPU.

    jaxplace run --devices 4 --policy sample_scripts/policies/mixed_precision.toml \\
        sample_scripts/placement_mixed_precision.py

The policy names an alias ``accel`` = the first of gpu:0, cpu:1 that exists: on a CPU-only
machine cpu:1 stands in for the accelerator, and the audit says so.
"""
import jax.numpy as jnp
import numpy as np

x = jnp.asarray(np.linspace(-1, 1, 256 * 128, dtype=np.float32).reshape(256, 128))
w = jnp.asarray(np.linspace(0, 1, 128 * 64, dtype=np.float32).reshape(128, 64))
h = x.astype(jnp.float16) @ w.astype(jnp.float16)   # float16 matmul -> accelerator
total = jnp.sum(h.astype(jnp.float32))              # float32 reduction -> CPU
print(f"total {float(total):.3f}")
