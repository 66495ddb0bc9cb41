"""What ``x[idx]`` uploads: JAX turns a basic index into slices whose start indices it may
send to the device (measured with ``jax.transfer_guard_host_to_device("log")``)."""
from __future__ import annotations

import numpy as np

_INDEX_CACHE: dict = {}


def _index_key(idx):
    """A hashable form of a basic index (ints, slices of ints, None, ...), else None."""
    items = idx if type(idx) is tuple else (idx,)
    key = []
    for i in items:
        t = type(i)
        if t is int or isinstance(i, np.integer):
            key.append(int(i))
        elif t is slice:
            parts = (i.start, i.stop, i.step)
            if not all(p is None or type(p) is int for p in parts):
                return None
            key.append(parts)
        elif i is None or i is Ellipsis:
            key.append(i)
        else:
            return None
    return tuple(key)


def index_uploads(args, dev: str) -> int | None:
    """How many int scalars ``x[idx]`` uploads, when JAX takes its static path: eager
    ``lax.slice`` with unit strides runs as a ``dynamic_slice`` whose start indices (one per
    dimension of ``x``) are uploaded (jax/_src/lax/slicing.py ``_slice_impl``; measured with
    transfer_guard: ``z[0]`` of a 2-d z uploads 2, ``y[1:3]`` 1, ``y[::2]`` and ``y[:]`` 0).
    None for the other paths (array indices: dynamic slice or gather), where the Python ints
    of the index are counted instead."""
    if len(args) != 2 or "," in dev:
        return None
    x, idx = args
    shape = getattr(x, "shape", None)
    key = _index_key(idx)
    if key is None or shape is None:
        return None
    key = (tuple(shape), key)
    n = _INDEX_CACHE.get(key, -1)
    if n == -1:
        from jax._src.numpy import indexing

        try:
            static = indexing.NDIndexer.from_raw_indices(idx, key[0]).to_static_slice(mode=None)
        except (TypeError, ValueError, IndexError):
            n = None
        else:
            n = 0 if static.is_trivial_slice(key[0]) or static.strides is not None else len(key[0])
        if len(_INDEX_CACHE) < 4096:
            _INDEX_CACHE[key] = n
    return n
