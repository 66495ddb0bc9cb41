"""Print values so that any difference shows: dtype, shape, a hash of the exact bytes, and
the first values at full precision (repr of Python floats round-trips)."""
import hashlib

import jax
import numpy as np


def show(label, tree):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    print(f"{label}: {treedef}")
    for i, leaf in enumerate(leaves):
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        a = np.asarray(leaf)
        digest = hashlib.sha256(a.tobytes()).hexdigest()[:24]
        print(f"  [{i}] {a.dtype} {a.shape} {digest} {a.ravel()[:4].tolist()!r}")
