"""The article's check: a jax.debug.callback that prints the device each array is on, inside a
``jax.device_placement`` block.

Under jaxplace the callback sees the device the policy chose (JAX alone hands it a host copy on
cpu:0, and ``x.device()`` would raise: ``device`` is a property there).

    jaxplace run --devices 2 sample_scripts/article_check_placement.py
"""
import sys

import jax
import jax.numpy as jnp
import jaxplace_cli

jaxplace_cli.install_jax_alias()

if len(jax.devices()) < 2:
    sys.exit("article_check_placement.py needs two devices: run it with `jaxplace run --devices 2 ...`")
TARGET = jax.devices()[1]


def my_strategy(op, *args):
    return TARGET  # every op on the second device


def check_placement(x):
    print(f"Array on {x.device()}")
    return x


with jax.device_placement(my_strategy):
    a = jnp.ones(3)
    b = jax.debug.callback(check_placement, a)  # prints the device my_strategy chose
    jax.effects_barrier()  # the callback has printed before the next line
print("callback returned", b)
