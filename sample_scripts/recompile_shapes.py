"""Variable-length batches into a jitted function: a new shape compiles it again.

Each distinct sequence length is a new input shape, and ``jax.jit`` compiles one executable
per shape: 4 lengths -> 4 compilations of ``score`` in 6 calls. Expect ``recompile`` saying
the shape of argument 0 changed.

    jaxplace run sample_scripts/recompile_shapes.py
"""
import jax
import jax.numpy as jnp

LENGTHS = [37, 64, 91, 128, 64, 37]  # token counts of six "sentences"
DIM = 32


@jax.jit
def score(tokens, weights):
    return jnp.tanh(tokens @ weights).sum()


def main():
    key = jax.random.PRNGKey(0)
    weights = jax.random.normal(key, (DIM, DIM))
    total = jnp.zeros(())
    for i, length in enumerate(LENGTHS):
        tokens = jax.random.normal(jax.random.PRNGKey(i + 1), (length, DIM))
        total = total + score(tokens, weights)  # a new length compiles score again
    print(f"total {float(total):.3f}")


if __name__ == "__main__":
    main()
