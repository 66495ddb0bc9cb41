"""jaxplace: which line of your JAX program moved which bytes between which devices, and why.

The command line is ``jaxplace`` (``python -m jaxplace_cli``). Importing this package does not
import JAX, so ``jaxplace run --devices N`` can still configure JAX before it loads; the
library API below is imported lazily.

- ``device_placement(policy)``: place the ops of a block by a policy (docs/policies.md).
- ``where(x)``: the device label(s) an array or pytree lives on.
- ``install_jax_alias()``: ``jax.device_placement`` as jaxplace's ``device_placement`` (it is
  jaxplace's API, not JAX's); ``jaxplace run`` installs it for every script.
- ``OpInfo``, ``PolicyError``: what a policy callable receives, and what a failing policy raises.
- ``budget(d2h=0, ...)``: fail a block (a test) that moves more than allowed; the pytest plugin
  offers the same as ``@pytest.mark.transfer_budget(...)``.
- ``%load_ext jaxplace_cli`` in IPython/Jupyter: the ``%%jaxplace`` cell magic and
  ``%jaxplace_audit`` (integrations/ipython.py; IPython is imported only then).
"""
__version__ = "0.1.0"

_LAZY = {
    "device_placement": ("jaxplace_cli.integrations.placement", "device_placement"),
    "where": ("jaxplace_cli.integrations.placement", "where"),
    "install_jax_alias": ("jaxplace_cli.integrations.placement", "install_jax_alias"),
    "OpInfo": ("jaxplace_cli.placement.opinfo", "OpInfo"),
    "PolicyError": ("jaxplace_cli.placement.errors", "PolicyError"),
    "budget": ("jaxplace_cli.integrations.budget", "budget"),
    "BudgetExceeded": ("jaxplace_cli.integrations.budget", "BudgetExceeded"),
}

__all__ = ["__version__", *_LAZY]


def load_ipython_extension(ip) -> None:
    """``%load_ext jaxplace_cli``: registers ``%%jaxplace`` and ``%jaxplace_audit``."""
    from jaxplace_cli.integrations.ipython import load

    load(ip)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'jaxplace_cli' has no attribute {name!r}")
