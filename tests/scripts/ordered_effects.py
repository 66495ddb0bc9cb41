"""An ordered effect inside jit: at each of the 3 calls JAX puts the effect's runtime token on
the call's device (an empty bool array the first time, the token after), one 0-byte
host-to-device leg the transfer guard logs each time: 3 legs by hand."""
import jax
import jax.numpy as jnp


@jax.jit
def g(v):
    jax.debug.print("sum={s}", s=v.sum(), ordered=True)
    return v + 1


x = jnp.arange(8.0)
for _ in range(3):
    x = g(x)  # L-call
print(x)
