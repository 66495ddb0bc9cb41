"""custom_jvp and custom_vjp functions, their grads, eagerly and under jit."""
import jax
import jax.numpy as jnp

from _show import show


@jax.custom_jvp
def safe_log1p_exp(x):
    return jnp.log1p(jnp.exp(x))


@safe_log1p_exp.defjvp
def _jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return safe_log1p_exp(x), t * jax.nn.sigmoid(x)


@jax.custom_vjp
def clip_grad(x):
    return x


clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.5, 0.5),))


def main():
    x = jnp.linspace(-3.0, 3.0, 7)
    show("custom_jvp", safe_log1p_exp(x))
    show("custom_jvp grad", jax.grad(lambda v: safe_log1p_exp(v).sum())(x))
    show("custom_jvp jit jvp", jax.jit(lambda v: jax.jvp(safe_log1p_exp, (v,), (jnp.ones_like(v),)))(x))
    show("custom_vjp grad", jax.grad(lambda v: (clip_grad(v) * v * 3.0).sum())(x))
