# Stress: THREADS threads each do N iterations of one small eager dispatch with a
# host->device transfer (x + 1.0: 1 op + 1 h2d of the Python scalar) and count them.
# Prints {"thread ident": iterations} as JSON at the end.
import json
import sys
import threading
import time

import jax.numpy as jnp

N = int(sys.argv[1])
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
counts = {}
start = threading.Barrier(THREADS)


def work(k):
    x = jnp.zeros((), jnp.float32)
    start.wait()
    n = 0
    for _ in range(N):
        x = x + 1.0
        n += 1
    counts[threading.get_ident()] = n
    assert float(x) == N  # every dispatch really ran


t0 = time.perf_counter()
threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({str(k): v for k, v in counts.items()}))
print(f"{THREADS * N} iterations in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
