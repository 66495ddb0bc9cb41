"""PRNG keys: legacy and typed keys, split, fold_in, samplers; eagerly and under jit/vmap."""
import jax
import jax.numpy as jnp

from _show import show


def main():
    key = jax.random.PRNGKey(42)
    k1, k2 = jax.random.split(key)
    show("normal", jax.random.normal(k1, (3, 4)))
    show("uniform", jax.random.uniform(k2, (5,), minval=-1.0, maxval=1.0))
    show("categorical jit", jax.jit(lambda k: jax.random.categorical(k, jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(8,)))(k1))
    show("permutation jit", jax.jit(lambda k: jax.random.permutation(k, 10))(k2))
    typed = jax.random.key(7)
    show("typed fold_in", jax.random.normal(jax.random.fold_in(typed, 3), (2,)))
    show("split keys", jax.random.split(typed, 3))
    show("jit vmap sample", jax.jit(jax.vmap(lambda k: jax.random.bernoulli(k, 0.3, (4,))))(jax.random.split(key, 3)))
