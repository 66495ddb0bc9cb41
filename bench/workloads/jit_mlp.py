"""P1 workload: a jitted training loop — N steps (default 1,500) of a 512x512 MLP step.

Two 512x512 dense layers (tanh), mean-squared error, ``jax.value_and_grad`` and an SGD update,
all inside one ``jax.jit``; parameters stay on the device and the loop never syncs with the
host (one ``block_until_ready`` after the last step). This is the pattern a profiler must not
slow down: one jit dispatch per step and nothing else.

    python bench/workloads/jit_mlp.py [--steps 1500] [--batch 64]
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from _common import emit, now, reference_mode


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    out = h @ params["w2"] + params["b2"]
    return jnp.mean((out - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
    return params, loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=512)
    a = ap.parse_args()
    with reference_mode():
        k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)
        w = a.width
        params = {"w1": jax.random.normal(k1, (w, w)) * 0.04, "b1": jnp.zeros(w),
                  "w2": jax.random.normal(k2, (w, w)) * 0.04, "b2": jnp.zeros(w)}
        x = jax.random.normal(k3, (a.batch, w))
        y = jax.random.normal(k4, (a.batch, w))
        t0 = now()
        loss = None
        for _ in range(a.steps):
            params, loss = train_step(params, x, y)
        jax.block_until_ready((params, loss))
        loop_s = now() - t0
    emit({"workload": "jit_mlp", "steps": a.steps, "batch": a.batch, "width": a.width,
          "jit_calls": a.steps, "loop_s": loop_s})


if __name__ == "__main__":
    main()
