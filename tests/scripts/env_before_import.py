# Sets a variable JAX reads when it is imported, then imports JAX (a common first line of a
# script): under python the setting applies. Neither JAX nor numpy is imported before the
# script's first line (numpy's OpenBLAS reads OPENBLAS_NUM_THREADS when imported, too).
import os
import sys

print("imported before the script:", sorted({"jax", "numpy"} & set(sys.modules)))
os.environ["JAX_ENABLE_X64"] = "1"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

print("x64:", jax.config.jax_enable_x64, jnp.ones(2).dtype)
