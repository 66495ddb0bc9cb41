import jax
import jax.numpy as jnp


@jax.jit
def f(x):
    return x.reshape(7, 7)


f(jnp.ones(10))
