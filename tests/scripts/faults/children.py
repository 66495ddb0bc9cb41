# Starts more Python while jaxplace records: a multiprocessing "spawn" pool whose workers
# use JAX, a fork child that does not, and `python -c` via subprocess. Prints what each
# child computed; the output must be the same under `python` and `jaxplace run`.
import multiprocessing as mp
import os
import subprocess
import sys

import jax.numpy as jnp


def square_sum(n):
    import jax.numpy as jnp  # in the spawned worker

    return float(jnp.sum(jnp.arange(n, dtype=jnp.float32) ** 2))


def forked(q):
    q.put(sum(i * i for i in range(10)))  # no JAX after fork (JAX is not fork-safe)


if __name__ == "__main__":
    print("parent", float(jnp.sum(jnp.arange(5.0))), flush=True)
    with mp.get_context("spawn").Pool(1) as pool:
        print("spawn", pool.map(square_sum, [3, 4, 5]), flush=True)
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=forked, args=(q,))
    p.start()
    print("fork", q.get(timeout=60), flush=True)
    p.join()
    print("fork exit", p.exitcode, flush=True)
    out = subprocess.run([sys.executable, "-c",
                          "import jax.numpy as jnp, sys; print(float(jnp.ones(3).sum())); "
                          "print(sys.argv[1:], file=sys.stderr)", "a", "b"],
                         capture_output=True, text=True, check=True)
    print("subprocess", out.stdout.strip(), out.stderr.strip(), flush=True)
    # what jaxplace put into the environment; JAXPLACE_CAPTURE is the user's own setting (the
    # test suite runs again with JAXPLACE_CAPTURE=python) and is passed on as it came
    print("env leak", sorted(k for k in os.environ if k.startswith("JAXPLACE") and k != "JAXPLACE_CAPTURE"),
          flush=True)
    print("parent again", float(jnp.sum(jnp.arange(4.0))), flush=True)
