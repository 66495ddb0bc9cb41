# A failed allocation (issue 27): 4 TiB on a CPU device raises RESOURCE_EXHAUSTED, uncaught.
import jax.numpy as jnp

keep = jnp.ones((1024, 256))  # line 4: 1 MiB live at the failure
jnp.zeros((1 << 40,), jnp.float32)  # line 5: 4 TiB
