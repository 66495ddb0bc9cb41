"""Arrays that die as cyclic garbage: each is held only by an object in a reference cycle, so
the cycle collector frees it (gc.collect here; an automatic collection does the same). The
memory tracker follows every array with a weakref whose callback records the free; the
collector handles such weakrefs itself, and an untracked one crashed the interpreter."""
import gc

import jax.numpy as jnp


class Node:
    pass


total = 0.0
for i in range(50):
    n = Node()
    n.me = n  # a cycle: only the cycle collector frees it
    n.arr = jnp.ones(3) * i  # L-cycle: 50 arrays of 12 bytes, each freed with its node
    total += float(n.arr.sum())
    del n
    if i % 10 == 9:
        gc.collect()
print("total", total)
