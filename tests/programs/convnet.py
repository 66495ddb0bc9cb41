"""A small convolutional classifier on synthetic 8x8 images (the style of JAX's
examples/mnist_classifier.py): conv -> relu -> mean-pool -> dense, trained by a jitted SGD
step, then evaluated eagerly."""
import jax
import jax.numpy as jnp
import numpy as np


def init(key):
    k1, k2 = jax.random.split(key)
    return {"conv": jax.random.normal(k1, (4, 1, 3, 3)) * 0.3, "dense": jax.random.normal(k2, (4, 3)) * 0.3}


def logits(params, x):
    y = jax.lax.conv_general_dilated(x, params["conv"], (1, 1), "SAME")
    y = jax.nn.relu(y)
    y = y.mean(axis=(2, 3))
    return y @ params["dense"]


def loss(params, x, labels):
    lp = jax.nn.log_softmax(logits(params, x))
    return -jnp.mean(jnp.take_along_axis(lp, labels[:, None], axis=1))


@jax.jit
def step(params, x, labels):
    g = jax.grad(loss)(params, x, labels)
    return jax.tree_util.tree_map(lambda p, d: p - 0.5 * d, params, g)


rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=(16, 1, 8, 8)).astype(np.float32))
labels = jnp.asarray(rng.integers(0, 3, size=16))
params = init(jax.random.PRNGKey(0))
for _ in range(3):
    params = step(params, x, labels)
pred = jnp.argmax(logits(params, x), axis=1)
print("accuracy", float(jnp.mean(pred == labels)))
