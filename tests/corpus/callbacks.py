"""Fidelity corpus: host callbacks inside jitted code.

Expected, by hand (x is float32[256] = 1,024 B), per call of step, 3 calls:
* pure_callback: operands to host 1,024 B (d2h), results back 1,024 B (h2d);
* io_callback returning a float64 scalar with x64 off: 1,024 B out, 4 B back;
* jax.debug.callback: 1,024 B out, nothing back;
then 3 reads of a 4 B scalar (float()).
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

log = []


def host_scale(a):
    return np.asarray(a) * 2


def host_sum(a):
    return np.float64(np.asarray(a).sum())


@jax.jit
def step(x):
    y = jax.pure_callback(host_scale, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    s = io_callback(host_sum, jax.ShapeDtypeStruct((), jnp.float32), y)
    jax.debug.callback(lambda v: log.append(float(v.max())), y)
    return s + 1.0


x = jnp.arange(256, dtype=jnp.float32)
for i in range(3):
    print(i, float(step(x + i)))
print("logged", log)
