"""The article's custom_placement policy, rewritten for simulated CPU devices: matrix products on
one device, transposes on another, everything else on a third.

The policy compares ``op == 'matmul'`` and ``op == 'transpose'`` (the jax.numpy names) as the
article writes it; jaxplace matches them to ``a @ b`` and ``x.T`` (primitives dot_general and
transpose). Runs as written under ``jaxplace run`` and under python (install_jax_alias):

    jaxplace run --devices 3 sample_scripts/article_custom_placement.py
    XLA_FLAGS=--xla_force_host_platform_device_count=3 python sample_scripts/article_custom_placement.py
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
import jaxplace_cli
from jaxplace_cli import where

jaxplace_cli.install_jax_alias()  # jax.device_placement is jaxplace's (jaxplace run sets it too)

devices = jax.devices()
if len(devices) < 3:
    sys.exit("article_custom_placement.py needs three devices: run it with `jaxplace run --devices 3 ...`")
MATMUL, TRANSPOSE, REST = devices[0], devices[1], devices[2]  # the article's GPU0, GPU1, CPU


def custom_placement(op, *args):
    if op == "matmul":
        return MATMUL
    elif op == "transpose":
        return TRANSPOSE
    else:
        return REST


with jax.device_placement(custom_placement):
    a = jnp.ones((256, 256))  # neither: the third device
    at = a.T  # a transpose: the second device
    b = a @ at  # a matrix product: the first device
    c = b.T  # a transpose again: the second device
print("a", where(a), "a.T", where(at), "a @ a.T", where(b), "b.T", where(c))
print("sum", float(np.asarray(c).sum()))  # read on the host: no op, no copy back
