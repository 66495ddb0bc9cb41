"""Kernel ridge regression with a choice of the ridge by held-out error (the style of JAX's
examples/kernel_lsq.py): Gram matrices, jnp.linalg.solve per ridge, eager."""
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=(40, 2)).astype(np.float32))
y = jnp.sin(x[:, 0]) + x[:, 1] ** 2
train, test = slice(0, 30), slice(30, 40)


def gram(a, b):
    return jnp.exp(-jnp.sum((a[:, None, :] - b[None, :, :]) ** 2, axis=-1))


k_tt = gram(x[train], x[train])
k_vt = gram(x[test], x[train])
best = None
for lam in (0.01, 0.1, 1.0):
    coef = jnp.linalg.solve(k_tt + lam * jnp.eye(30), y[train])
    err = float(jnp.mean((k_vt @ coef - y[test]) ** 2))
    best = min(best or (err, lam), (err, lam))
print("best ridge", best[1])
