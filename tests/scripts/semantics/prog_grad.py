"""grad (eager), value_and_grad, jacfwd/jacrev and hessian (under jit)."""
import jax
import jax.numpy as jnp
import numpy as np

from _show import show


def loss(params, x):
    w, b = params
    return jnp.mean(jnp.tanh(x @ w + b) ** 2)


def main():
    rng = np.random.default_rng(0)
    params = (jnp.asarray(rng.normal(size=(6, 3)), jnp.float32), jnp.zeros(3))
    x = jnp.asarray(rng.normal(size=(5, 6)), jnp.float32)
    show("grad eager", jax.grad(loss)(params, x))
    show("value_and_grad jit", jax.jit(jax.value_and_grad(loss))(params, x))
    f = lambda v: jnp.sin(v) * v ** 2
    v = jnp.linspace(-1.0, 1.0, 4)
    show("jacfwd jit", jax.jit(jax.jacfwd(f))(v))
    show("jacrev jit", jax.jit(jax.jacrev(f))(v))
    show("hessian jit", jax.jit(jax.hessian(lambda v: jnp.sum(f(v))))(v))
