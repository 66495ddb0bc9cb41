# Imports JAX and never uses a device (a --help, an early error): no backend is started, and
# none may be started behind its back before it exits (on an accelerator that is seconds).
import atexit

import jax  # noqa: F401 - imported, not used
from jax._src import xla_bridge

atexit.register(lambda: print("backend started by the end:", xla_bridge.backends_are_initialized()))
