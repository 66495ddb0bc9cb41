"""Gaussian-process regression with jax.scipy solves (the style of JAX's
examples/gaussian_process_regression.py): RBF kernel, Cholesky factor, triangular solves for
the posterior mean and variance, and the log marginal likelihood."""
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np


def rbf(a, b, scale=0.5):
    d = a[:, None] - b[None, :]
    return jnp.exp(-0.5 * (d / scale) ** 2)


rng = np.random.default_rng(0)
x = jnp.asarray(np.linspace(-2, 2, 24).astype(np.float32))
y = jnp.sin(3 * x) + 0.1 * jnp.asarray(rng.normal(size=24).astype(np.float32))
xs = jnp.asarray(np.linspace(-2, 2, 8).astype(np.float32))
k = rbf(x, x) + 0.01 * jnp.eye(24)
chol = jsl.cholesky(k, lower=True)
alpha = jsl.cho_solve((chol, True), y)
mean = rbf(xs, x) @ alpha
v = jsl.solve_triangular(chol, rbf(x, xs), lower=True)
var = jnp.diag(rbf(xs, xs)) - jnp.sum(v * v, axis=0)
lml = -0.5 * y @ alpha - jnp.sum(jnp.log(jnp.diag(chol))) - 12 * jnp.log(2 * jnp.pi)
print("mean", np.round(np.asarray(mean), 2).tolist())
print("var>0", bool(jnp.all(var > 0)), "lml", round(float(lml), 2))
