"""Variational inference loop (automatic differentiation VI, the style of JAX's
examples/advi.py): a mean-field Gaussian over the weights of a Bayesian logistic
regression, the ELBO's gradient by jax.grad, plain gradient ascent, all eager."""
import jax
import jax.numpy as jnp
import numpy as np


def log_joint(w, x, t):
    logits = x @ w
    return jnp.sum(t * logits - jnp.logaddexp(0.0, logits)) - 0.5 * jnp.sum(w ** 2)


def elbo(params, eps, x, t):
    mu, log_sigma = params
    w = mu + jnp.exp(log_sigma) * eps
    return log_joint(w, x, t) + jnp.sum(log_sigma)


rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=(32, 3)).astype(np.float32))
t = jnp.asarray((rng.random(32) < 0.5).astype(np.float32))
params = (jnp.zeros(3), jnp.zeros(3))
key = jax.random.PRNGKey(0)
grad = jax.grad(elbo)
for _ in range(5):
    key, sub = jax.random.split(key)
    eps = jax.random.normal(sub, (3,))
    g = grad(params, eps, x, t)
    params = (params[0] + 0.05 * g[0], params[1] + 0.05 * g[1])
print("mu", np.round(np.asarray(params[0]), 2).tolist())
