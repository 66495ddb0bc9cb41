"""The innermost user frames of the call-stack sample (tests/test_stacks.py)."""
import jax
import numpy as np


def attn(x):
    y = jax.device_put(x, jax.devices()[1])  # d2d: x's 1024 bytes, once a step
    return np.asarray(y)  # d2h: 1024 bytes, once a step


def helper(n):
    return jax.device_put(np.ones(n, np.float32))  # h2d: 4 * n bytes; two callers in model.py
