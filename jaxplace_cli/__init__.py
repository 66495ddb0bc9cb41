"""jaxplace: which line of your JAX program moved which bytes between which devices, and why.

The command line is ``jaxplace`` (``python -m jaxplace_cli``). Importing this package does not
import JAX, so ``jaxplace run --devices N`` can still configure JAX before it loads.
"""
__version__ = "0.1.0"
