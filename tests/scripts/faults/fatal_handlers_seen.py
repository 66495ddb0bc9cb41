"""What a script sees of the fatal signals' handlers (tests/test_faults_signals.py): the defaults,
as under python — jaxplace's saver is installed there, unseen — its own handler set and
restored, then a SIGTERM with the default back: the process dies of it."""
import os
import signal

import jax.numpy as jnp

print("handlers", signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP), flush=True)


def handler(signum, frame):
    print("handled", signal.Signals(signum).name, flush=True)


old = signal.signal(signal.SIGTERM, handler)
print("previous", old, flush=True)
os.kill(os.getpid(), signal.SIGTERM)
print("restored", signal.signal(signal.SIGTERM, old) is handler, signal.getsignal(signal.SIGTERM), flush=True)
print("sum", float((jnp.ones(3) + 1).sum()), flush=True)
os.kill(os.getpid(), signal.SIGTERM)
print("never")
