"""A SIGTERM that arrives while JAX starts its backend (its plugin lock held, on the main
thread): under python the process dies of it after printing "before". jaxplace's handler
saved the run by asking JAX for its devices' memory statistics, which waited for that lock
forever (found by hostile testing, 2026-12-05)."""
import gc
import os
import signal

import jax.numpy as jnp
from jax._src import xla_bridge


def send_once_lock_held(phase, info):
    if phase == "start" and xla_bridge._plugin_lock.locked():
        os.kill(os.getpid(), signal.SIGTERM)


gc.callbacks.append(send_once_lock_held)
gc.set_threshold(1)  # a collection at nearly every allocation: one falls inside the backend start
print("before", flush=True)
x = jnp.ones(10)
print("after", float(x.sum()), flush=True)
