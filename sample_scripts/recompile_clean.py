"""The clean twin of recompile_shapes.py: pad every batch to one length and mask the padding.

One input shape -> one compilation of ``score``, whatever the sentence lengths.

    jaxplace run sample_scripts/recompile_clean.py
"""
import jax
import jax.numpy as jnp

LENGTHS = [37, 64, 91, 128, 64, 37]
DIM = 32
BUCKET = 128  # every batch is padded to this many tokens


@jax.jit
def score(tokens, mask, weights):
    return (jnp.tanh(tokens @ weights) * mask[:, None]).sum()


def main():
    key = jax.random.PRNGKey(0)
    weights = jax.random.normal(key, (DIM, DIM))
    positions = jnp.arange(BUCKET)
    total = jnp.zeros(())
    for i, length in enumerate(LENGTHS):
        tokens = jax.random.normal(jax.random.PRNGKey(i + 1), (BUCKET, DIM))  # padded
        mask = (positions < length).astype(jnp.float32)
        total = total + score(tokens, mask, weights)  # always (128, 32): compiled once
    print(f"total {float(total):.3f}")


if __name__ == "__main__":
    main()
