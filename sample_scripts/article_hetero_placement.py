"""The article's hetero_placement(op, shape): op families by the hardware that suits them.

``op in ['conv', 'matmul']`` and ``op in ['sort', 'scan']`` name families: a convolution
(jnp.convolve, lax.conv), a matrix product (``@``, jnp.dot); a sort (jnp.sort, jnp.argsort) and
a prefix scan (jnp.cumsum). Three simulated devices stand in for the article's TPU, GPU and CPU.

    jaxplace run --devices 3 sample_scripts/article_hetero_placement.py
"""
import sys

import jax
import jax.numpy as jnp
import jaxplace_cli
from jaxplace_cli import where

jaxplace_cli.install_jax_alias()

if len(jax.devices()) < 3:
    sys.exit("article_hetero_placement.py needs three devices: run it with `jaxplace run --devices 3 ...`")
TPU, GPU, CPU = jax.devices()[:3]  # stand-ins: matrix unit, sequential unit, host


def hetero_placement(op, shape):
    if op in ["conv", "matmul"]:
        return TPU
    elif op in ["sort", "scan"]:
        return GPU
    else:
        return CPU


with jax.device_placement(hetero_placement):
    signal = jnp.linspace(-1.0, 1.0, 512)  # other: CPU
    smooth = jnp.convolve(signal, jnp.ones(5) / 5, mode="same")  # conv: TPU (jnp.ones: CPU)
    gram = signal.reshape(16, 32) @ signal.reshape(32, 16)  # matmul: TPU (the reshapes: CPU)
    ranked = jnp.sort(smooth)  # sort: GPU
    order = jnp.argsort(smooth)  # sort: GPU
    running = jnp.cumsum(smooth)  # scan: GPU
    squashed = jnp.tanh(running)  # other: CPU
print("conv", where(smooth), "matmul", where(gram), "sort", where(ranked), "argsort", where(order),
      "cumsum", where(running), "tanh", where(squashed))
g, o, q = jax.device_get((gram, order, squashed))  # one read, on the host
print("checks", round(float(g.sum()), 3), int(o[0]), round(float(q.sum()), 3))
