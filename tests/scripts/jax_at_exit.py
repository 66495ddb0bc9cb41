# Never imports JAX while it runs; its atexit handlers (run after jaxplace saved the run) see
# whether JAX or numpy was imported behind its back, then import it and compute.
import atexit
import sys


def late():
    import jax.numpy as jnp

    print("late:", float(jnp.ones(3).sum()))


atexit.register(late)  # atexit runs last-in first-out: this one second
atexit.register(lambda: print("jax imported by the end:", "jax" in sys.modules,
                              "numpy:", "numpy" in sys.modules))
