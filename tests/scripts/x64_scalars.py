# x64 switched on by the script itself, after jaxplace installed its hooks: Python scalar
# operands then upload 64-bit values (the 2.0, the 3 and the True below).
import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

x = jnp.ones(4)
y = (x * 2.0 + 3) * True
print(y.dtype, float(y.sum()))
