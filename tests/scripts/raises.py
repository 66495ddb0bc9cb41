import jax
import jax.numpy as jnp


def inner(x):
    return x + undefined_name  # noqa: F821


@jax.jit
def f(x):
    return x * 2


y = f(jnp.ones(512))
print("computed", float(y.sum()))
inner(y)
