"""Nothing on the host reaches a dispatch: JAX's transfer guard logs no host-to-device leg,
so none may be recorded (x ** 2 is integer_pow: the 2 is a parameter, not an operand)."""
import jax
import jax.numpy as jnp

x = jnp.arange(8, dtype=jnp.float32)
y = x ** 2
z = jnp.sum(jnp.sin(y) * x)
w = jax.jit(lambda a: a ** 3)(y)
print(z.shape, w.shape, w.dtype)
