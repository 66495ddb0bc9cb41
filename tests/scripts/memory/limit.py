# suggest --memory-limit ground truth (tests/test_suggest_memory.py), 1 MiB = 1024 x 256 float32.
# Everything runs on cpu:0: live bytes there are 2 MiB after line A2 (a, b), 2 MiB after C
# (b, c), 3 MiB after D (b, c, d): the peak. C and D read nothing, so a policy can send either
# to cpu:1 at no transfer cost: cpu:0 2 MiB, cpu:1 1 MiB. No placement peaks below 2 MiB:
# b = a * 2 holds a and b on one device (a copy of a travels with b to another device).
import jax.numpy as jnp

a = jnp.ones((1024, 256), jnp.float32)  # line 8 (A)
b = a * 2  # line 9 (A2)
del a
c = jnp.full((1024, 256), 3.0, jnp.float32)  # line 11 (C)
d = jnp.full((1024, 256), 4.0, jnp.float32)  # line 12 (D)
print("ok")
