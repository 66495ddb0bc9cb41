"""A sample with nested user functions over three files (issue 28, tests/test_stacks.py):
train.py:step -> model.py:loss -> layers.py:attn, and two callers of layers.helper. Every
transfer's bytes are set by hand, so each frame's total is known without the recorder."""
import jax
import model
import numpy as np

double = jax.jit(lambda v: v * 2)  # called once a step: the run's steps (no transfer: x is on cpu:0)


def step(x):
    double(x)
    return model.loss(x)


w = model.init()
x = jax.device_put(np.arange(256, dtype=np.float32), jax.devices()[0])  # h2d: 1024 bytes
for _ in range(3):
    step(x)
