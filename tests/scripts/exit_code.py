import sys

import jax.numpy as jnp

x = jnp.ones(300) * 2
print("before exit", float(x.sum()))
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
