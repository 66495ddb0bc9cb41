"""Library row of `make bench` (issue 29 item 5): a real library training program.

flax.nnx and optax as their docs show them: an ``nnx.Module`` MLP (64 -> 256 -> 256 -> 1),
``nnx.Optimizer`` with ``optax.adam``, an ``nnx.jit`` train step, a fresh numpy batch every
step (uploaded by the call, as a data loader's would be) and the loss read back every 50 steps
(a logging line). Measures the loop only.

    python bench/workloads/flax_train.py [--steps 300] [--batch 128]
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _common import emit, now, reference_mode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=128)
    a = ap.parse_args()
    with reference_mode():
        import optax
        from flax import nnx

        class MLP(nnx.Module):
            def __init__(self, rngs):
                self.l1 = nnx.Linear(64, 256, rngs=rngs)
                self.l2 = nnx.Linear(256, 256, rngs=rngs)
                self.l3 = nnx.Linear(256, 1, rngs=rngs)

            def __call__(self, x):
                return self.l3(nnx.relu(self.l2(nnx.relu(self.l1(x)))))

        model = MLP(nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

        @nnx.jit
        def train_step(model, optimizer, x, y):
            def loss_fn(m):
                return jnp.mean((m(x) - y) ** 2)

            loss, grads = nnx.value_and_grad(loss_fn)(model)
            optimizer.update(model, grads)
            return loss

        rng = np.random.default_rng(1)
        batches = [rng.normal(size=(a.batch, 64)).astype(np.float32) for _ in range(8)]
        t0 = now()
        logged = 0
        loss = None
        for step in range(a.steps):
            x = batches[step % len(batches)]
            loss = train_step(model, optimizer, x, x[:, :1] * 2.0)
            if step % 50 == 0:
                float(loss)  # the logging line's read
                logged += 1
        jax.block_until_ready(loss)
        loop_s = now() - t0
    emit({"workload": "flax_train", "steps": a.steps, "batch": a.batch, "jit_calls": a.steps,
          "loss_reads": logged, "loop_s": loop_s})


if __name__ == "__main__":
    main()
