"""The middle frames of the call-stack sample: two callers of layers.helper."""
import layers


def loss(x):
    a = layers.attn(x)
    b = layers.helper(8)  # 32 bytes a step
    return a, b


def init():
    return layers.helper(16)  # 64 bytes, once
