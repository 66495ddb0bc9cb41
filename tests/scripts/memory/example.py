# The device-memory example of issue 27, hand-computed in tests/test_memory_capture.py:
# cpu:0 peaks at 2 MiB after line Q (P and Q live), cpu:1 at 5 MiB after line S (R and S);
# at exit cpu:0 holds 1 MiB (Q), cpu:1 1 MiB (R).
import jax
import jax.numpy as jnp

d0, d1 = jax.devices()[:2]
p = jax.device_put(jnp.ones((1024, 256), jnp.float32), d0)  # line 8 (P): 1 MiB on cpu:0
q = p + 1  # line 9 (Q): 1 MiB on cpu:0
del p
r = jax.device_put(q, d1)  # line 11 (R): 1 MiB on cpu:1
s = jnp.ones((4096, 256), device=d1)  # line 12 (S): 4 MiB on cpu:1
del s
