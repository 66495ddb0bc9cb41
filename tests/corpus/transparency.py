"""Fidelity corpus: what code can observe of a jitted function, printed the same under python
and under jaxplace (the jit wrapper must be transparent). No expected transfers of note."""
import functools
import inspect
import pickle
import traceback

import jax
import jax.numpy as jnp


def f(x):
    """Doubles x."""
    return x * 2


jf = jax.jit(f)
print("wrapped is f:", jf.__wrapped__ is f, "| name:", jf.__name__, "| doc:", jf.__doc__)
print("getstate function_name:", jf.__getstate__()["function_name"],
      jax.jit(functools.partial(f)).__getstate__()["function_name"])
try:
    pickle.dumps(jf)
    print("pickle: ok")
except Exception as exc:
    print("pickle:", type(exc).__name__, str(exc).splitlines()[0])
x = jnp.arange(3.0)
print("lower:", "func.func public @main" in jf.lower(x).as_text())
print("trace:", jf.trace(x).jaxpr)
print("eval_shape:", jf.eval_shape(x))
print("signature:", inspect.signature(jf))
print("call:", jf(x), "| static:", jax.jit(lambda a, n: a * n, static_argnums=1)(x, 3))


@jax.jit
def broken(v):
    return v + undefined_name  # noqa: F821


try:
    broken(x)
except NameError as exc:
    frames = traceback.extract_tb(exc.__traceback__)
    print("filtered traceback:", [(fr.name, fr.line) for fr in frames])


class Model:
    scale = 3.0

    @functools.partial(jax.jit, static_argnums=0)
    def apply(self, v):
        return v * self.scale


print("method:", Model().apply(x))
print("vmap of jit:", jax.vmap(jf)(jnp.ones((2, 3))).shape, "| grad of jit:", jax.grad(lambda v: jf(v).sum())(x))
