"""The article's mixed_precision_placement(op, dtype, shape): float16 matrix products on the
accelerator, the float32 accumulation on the host.

``op == 'dot_general'`` matches ``a @ a.T``; ``op == 'add'`` with ``dtype == jnp.float32`` matches
``jnp.sum(b, dtype=jnp.float32)``: a sum accumulates by adding, and its dtype is the one it
computes in (the ``dtype=`` argument). The policy goes through ``functools.partial`` as in the
article. The accelerator is the last device here (a stand-in: no GPU needed).

    jaxplace run --devices 2 sample_scripts/article_mixed_precision.py
"""
import sys
from functools import partial

import jax
import jax.numpy as jnp
import jaxplace_cli
from jaxplace_cli import where

jaxplace_cli.install_jax_alias()

if len(jax.devices()) < 2:
    sys.exit("article_mixed_precision.py needs two devices: run it with `jaxplace run --devices 2 ...`")
ACCEL = jax.devices()[-1]  # the article's jax.devices('gpu')[0]
HOST = jax.devices("cpu")[0]  # the article's jax.devices('cpu')[0]


def mixed_precision_placement(op, dtype, shape):
    if op == "dot_general" and dtype == jnp.float16:
        return ACCEL
    elif op == "add" and dtype == jnp.float32:
        return HOST
    else:
        return ACCEL


with jax.device_placement(partial(mixed_precision_placement)):
    a = jnp.ones((256, 256), dtype=jnp.float16)
    b = a @ a.T  # float16 matrix product: the accelerator
    c = jnp.sum(b, dtype=jnp.float32)  # float32 accumulation: the host
print("a", where(a), "a @ a.T", where(b), b.dtype, "sum", where(c), c.dtype)
print("total", float(c))
