"""Fidelity corpus: the same uploads with x64 off (the default) and on (argument "on").

Expected, by hand: a float64 (500, 100) array, an int64 (1000,) array, a Python float and a
Python int go to a jitted function, twice:
* x64 off: float32 200,000 B + int32 4,000 B + 4 B + 4 B per call;
* x64 on:  float64 400,000 B + int64 8,000 B + 8 B + 8 B per call;
then jnp.asarray(a) in the print: 200,000 B (off) or 400,000 B (on), and one 4 B float().
The script turns x64 off again at the end (the acceptance test runs every corpus program in
one process).
"""
import sys

import jax

ON = sys.argv[1:] == ["on"]
if ON:
    jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

f = jax.jit(lambda a, i, s, n: (a.sum() * s + i.sum() * n).astype(jnp.float32))
a = np.full((500, 100), 0.5)
i = np.arange(1000)
for _ in range(2):
    r = f(a, i, 1.5, 2)
print("x64", ON, a.dtype, jnp.asarray(a).dtype, float(r))
if ON:
    jax.config.update("jax_enable_x64", False)
