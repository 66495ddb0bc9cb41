"""Jit functions made before jaxplace's hooks were installed.

Under ``jaxplace run`` every ``jax.jit`` the script makes is a recording ``JitFunction``: the
hooks are in before the script starts. Under plain python, ``device_placement`` installs the
hooks when its block is entered, so a module-level ``@jax.jit`` defined before the block is
JAX's own ``PjitFunction``, whose calls never reach Python — the policy would silently not
place them (issue 14). ``adopt`` wraps such a function in the same ``JitFunction``
``jax.jit`` would have returned under the hooks (same op name, same static arguments), so it
is placed and recorded exactly as under ``jaxplace run``.
"""
from __future__ import annotations

from jaxplace_cli.capture.jaxhooks.dispatch import CallSpec
from jaxplace_cli.capture.jaxhooks.jit import JitFunction, jit_name
from jaxplace_cli.model.events import OP_JIT

_LIBRARIES = ("jax", "jaxlib", "jaxplace_cli", "flax", "optax", "equinox", "haiku")


def is_unhooked_jit(obj) -> bool:
    """A ``jax.jit`` function of the user's own code made without the hooks. JAX's own jitted
    functions (``jnp.tanh`` imported by name) are not: the module hooks cover those."""
    if type(obj).__name__ != "PjitFunction" or not hasattr(obj, "_jit_info"):
        return False
    module = getattr(getattr(obj, "__wrapped__", None), "__module__", "") or ""
    return module.split(".", 1)[0] not in _LIBRARIES


def adopt(obj) -> JitFunction:
    """``obj`` (a PjitFunction) as the JitFunction ``jax.jit`` returns under the hooks."""
    info = obj._jit_info
    spec = CallSpec(jit_name(getattr(obj, "__wrapped__", obj)), OP_JIT, scalar_operands=True, flatten=True,
                    static_argnums=tuple(info.static_argnums or ()),
                    static_argnames=tuple(info.static_argnames or ()))
    return JitFunction(obj, spec)
