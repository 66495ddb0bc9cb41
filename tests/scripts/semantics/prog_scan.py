"""lax.scan (carry + outputs), eagerly and under jit, and grad through a scan."""
import jax
import jax.numpy as jnp
from jax import lax

from _show import show


def rnn(h, x):
    h = jnp.tanh(0.5 * h + x)
    return h, h.sum()


def main():
    xs = jnp.linspace(-1.0, 1.0, 30).reshape(10, 3)
    show("scan eager", lax.scan(rnn, jnp.zeros(3), xs))
    show("scan jit", jax.jit(lambda xs: lax.scan(rnn, jnp.ones(3), xs))(xs))
    show("grad scan", jax.grad(lambda xs: lax.scan(rnn, jnp.zeros(3), xs)[1].sum())(xs))
    show("scan reverse", lax.scan(lambda c, x: (c * 0.9 + x, c), 0.0, jnp.arange(5.0), reverse=True))
