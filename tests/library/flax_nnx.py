"""flax.nnx as its docs show it: an nnx.Module MLP, nnx.Optimizer, nnx.jit train step."""
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(4, 8, rngs=rngs)
        self.l2 = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x):
        return self.l2(nnx.relu(self.l1(x)))


model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.sgd(0.05), wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(m):
        return jnp.mean((m(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


rng = np.random.default_rng(1)
x = rng.normal(size=(32, 4)).astype(np.float32)
y = x.sum(axis=1, keepdims=True)
for _ in range(5):
    loss = train_step(model, optimizer, x, y)
print("loss", round(float(loss), 3))
