"""equinox as its docs show it: an eqx.nn.MLP, eqx.filter_jit + eqx.filter_value_and_grad,
optax updates applied with eqx.apply_updates."""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

model = eqx.nn.MLP(2, 1, width_size=8, depth=2, key=jax.random.PRNGKey(0))
opt = optax.adam(1e-2)
opt_state = opt.init(eqx.filter(model, eqx.is_array))


@eqx.filter_value_and_grad
def loss(m, x, y):
    return jnp.mean((jax.vmap(m)(x) - y) ** 2)


@eqx.filter_jit
def make_step(m, s, x, y):
    value, grads = loss(m, x, y)
    updates, s = opt.update(grads, s, m)
    return eqx.apply_updates(m, updates), s, value


x = np.linspace(-1, 1, 40, dtype=np.float32).reshape(20, 2)
y = np.sin(x[:, :1])
for _ in range(5):
    model, opt_state, value = make_step(model, opt_state, x, y)
print("loss", round(float(value), 4))
