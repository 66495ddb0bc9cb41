"""optax as its docs show it: a linear model fitted with adam, `optax.apply_updates`, a jitted
step, NumPy data handed to the step every iteration, the loss read every 10 steps."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

rng = np.random.default_rng(0)
X = rng.normal(size=(64, 3)).astype(np.float32)
y = X @ np.array([1.0, -2.0, 0.5], np.float32) + 0.1

params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
opt = optax.adam(learning_rate=0.1)
state = opt.init(params)


def loss_fn(p, x, t):
    return jnp.mean((x @ p["w"] + p["b"] - t) ** 2)


@jax.jit
def step(p, s, x, t):
    loss, grads = jax.value_and_grad(loss_fn)(p, x, t)
    updates, s = opt.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss


for i in range(30):
    params, state, loss = step(params, state, X, y)
    if i % 10 == 0:
        print(f"step {i} loss {float(loss):.4f}")
print("w", np.round(np.asarray(params["w"]), 2).tolist())
