# Sets a variable JAX reads when it is imported, then imports JAX (a common first line of a
# script): under python the setting applies.
import os

os.environ["JAX_ENABLE_X64"] = "1"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

print("x64:", jax.config.jax_enable_x64, jnp.ones(2).dtype)
