# Four threads dispatch JAX work concurrently; each counts what it did and the script prints
# the counts as JSON (keyed by threading.get_ident(), which is what jaxplace records).
#   per iteration: f(x): 1 op; y + 1.0: 1 op + 1 h2d (Python scalar operand);
#   jax.device_put(numpy): 1 op + 1 h2d; float(y[0]) and float(z[0]): each 1 op (getitem)
#   + 1 h2d (the Python int index) + 1 d2h (the read) -> 5 ops and 6 transfers.
import json
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
THREADS = 4
f = jax.jit(lambda a: a * 2.0)
counts = {}
start = threading.Barrier(THREADS)


def work(k):
    ops = transfers = 0
    x = jnp.full((8,), float(k))
    ops += 1
    transfers += 1  # its fill value: one host-to-device leg (JAX's transfer guard logs it)
    start.wait()
    for i in range(N):
        y = f(x)
        y = y + 1.0
        z = jax.device_put(np.full((4,), i, np.float32))
        v = float(y[0])
        w = float(z[0])
        ops += 5
        transfers += 6
        assert v == 2.0 * k + 1.0 and w == i
    counts[threading.get_ident()] = {"ops": ops, "transfers": transfers}


threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({str(k): v for k, v in counts.items()}))
