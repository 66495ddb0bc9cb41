"""The public functions of jax.numpy, jax.nn, jax.random, jax.scipy.* wrapped as recorded ops
(installed by ``jaxhooks.install``)."""
from __future__ import annotations

import importlib
import inspect
import sys

from jaxplace_cli.capture.import_hook import after_import
from jaxplace_cli.model.events import OP_JNP

# Module -> op-name prefix. Functions there are wrapped when they are plain functions,
# jitted functions or custom_jvp/vjp objects; classes, dtypes and constants are left alone.
WRAPPED_MODULES = {
    "jax.numpy": "",
    "jax.numpy.linalg": "linalg.",
    "jax.numpy.fft": "fft.",
    "jax.nn": "nn.",
    "jax.random": "random.",
    "jax.scipy.linalg": "scipy.linalg.",
    "jax.scipy.special": "scipy.special.",
    "jax.scipy.signal": "scipy.signal.",
    "jax.scipy.fft": "scipy.fft.",
    "jax.scipy.ndimage": "scipy.ndimage.",
    "jax.scipy.sparse.linalg": "scipy.sparse.linalg.",
}
# Plain functions that jit their body afresh at each call (`api.jit(_interp, ...)` inside
# jnp.interp), a jitted function the hooks never see: every argument but None and a str is
# its dynamic operand and uploaded by it, so the op counts its own host operands, as a jitted
# function's call does (the guard logs interp(numpy, x, x)'s leg; it went unrecorded).
JITS_ITS_BODY = frozenset({"interp"})

# Functions that never dispatch device work or must keep their identity.
NOT_OPS = frozenset({
    "shape", "ndim", "size", "result_type", "promote_types", "issubdtype", "can_cast",
    "dtype", "iinfo", "finfo", "isdtype", "isscalar", "iterable", "load", "save", "savez",
    "get_printoptions", "set_printoptions", "printoptions", "vectorize", "frompyfunc",
    "piecewise", "ufunc", "from_dlpack", "broadcast_shapes", "key_data", "key_impl",
    "default_prng_impl",
})

GENERATION = [0]  # bumped by jaxhooks.uninstall(): a module imported later is no longer wrapped
# modname -> (patch, prefix, generation) of the install waiting for its import: one finder per
# module however often hooks are installed and removed (a test session does it many times)
_PENDING: dict[str, tuple] = {}


def install(patch, report) -> None:
    """Wrap the functions of every module of WRAPPED_MODULES already imported; the others
    (jax.scipy.*: ~28 ms of imports a script that never uses them would pay) when the script
    first imports them (import_hook.after_import; issue 29)."""
    _BEFORE[0] = frozenset(sys.modules)
    for modname, prefix in WRAPPED_MODULES.items():
        if modname in sys.modules or not modname.startswith("jax.scipy."):
            _wrap_module(patch, modname, prefix, report)
            continue
        if modname not in _PENDING:
            after_import(modname, lambda modname=modname: _on_import(modname))
        _PENDING[modname] = (patch, prefix, GENERATION[0])
        report.installed.append(f"{modname} (when imported)")


def _on_import(modname: str) -> None:
    patch, prefix, generation = _PENDING.pop(modname)
    if GENERATION[0] == generation:  # not uninstalled (or reinstalled) since
        _wrap_module(patch, modname, prefix, _Report())


def _is_wrappable(obj) -> bool:
    if isinstance(obj, type):
        return False
    if inspect.isfunction(obj):
        return True
    return type(obj).__name__ in ("PjitFunction", "custom_jvp", "custom_vjp")


class _Report:  # what a module wrapped on import reports to: nobody reads it any more
    def __init__(self):
        self.installed, self.failed = [], []


def _wrap_module(patch, modname: str, prefix: str, report) -> None:
    from jaxplace_cli.capture.jaxhooks import legs
    from jaxplace_cli.capture.jaxhooks.dispatch import CallSpec, wrap

    try:
        mod = importlib.import_module(modname)
    except Exception as exc:
        report.failed.append((modname, f"import failed: {exc}"))
        return
    n = 0
    for name, obj in list(vars(mod).items()):
        if name.startswith("_") or name in NOT_OPS or not _is_wrappable(obj):
            continue
        original = getattr(obj, "__jaxplace_original__", None)
        if original is not None:
            # a wrapper already (bound by value from a patched _patch_home, as jax.scipy.special
            # imports logsumexp): recorded so that uninstall puts the function back here too
            setattr(mod, name, original)
            patch(mod, name, obj)
            continue
        # a jitted function uploads its host arguments; a plain one's dispatches inside
        # count their own (legs.py)
        hit = _SHARED.get(id(obj))
        if hit is not None and hit[0] is obj and hit[2] == GENERATION[0]:
            wrapper = hit[1]  # another name of a function wrapped already (jax.nn.swish: silu)
        else:
            static = legs.jit_static(obj)
            spec = CallSpec(prefix + name, OP_JNP, scalar_operands=static is not None or (
                                modname == "jax.numpy" and name in JITS_ITS_BODY),
                            static_argnums=static[0] if static else (),
                            static_argnames=static[1] if static else ())
            wrapper = wrap(obj, spec)
            _SHARED[id(obj)] = (obj, wrapper, GENERATION[0])
        patch(mod, name, wrapper)
        _patch_home(patch, obj, wrapper)
        n += 1
    report.installed.append(f"{modname} ({n} functions)")


# id(function) -> (function, its wrapper, GENERATION): one wrapper for every name of a function,
# so that aliases stay one object as under python (jax.nn.silu is jax.nn.swish, jax.nn.tanh is
# jnp.tanh; a dict of activations by function found none); the first name wrapped is its op name
_SHARED: dict[int, tuple] = {}


def _patch_home(patch, obj, wrapper) -> None:
    """The wrapper also where the function is defined (``jax._src.nn.functions.gelu``): pickle
    finds a function by its ``__module__`` and ``__qualname__`` and refuses one that is not the
    object there ("not the same object as jax._src.nn.functions.gelu"), so every jax.nn,
    jax.random and jax.scipy function failed to pickle (a ProcessPoolExecutor given
    jax.nn.gelu). The pickle names the same place, which a plain process resolves to JAX's own."""
    modname = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if not inspect.isfunction(obj) or not isinstance(modname, str) or not modname.startswith("jax._src.") \
            or "." in qualname:
        return
    home = sys.modules.get(modname)
    if home is not None and getattr(home, qualname, None) is obj:
        patch(home, qualname, wrapper)


_BEFORE: list = [frozenset()]  # the modules imported when the hooks were installed


def uninstalled() -> None:
    """After ``jaxhooks.uninstall``: a module imported later is no longer wrapped, and a jax
    module imported while the hooks were in that bound a wrapper by value (``from
    jax._src.ops.special import logsumexp`` once ``_patch_home`` had put one there) gets the
    function back: an in-process recording (the pytest plugin, IPython) left 21 behind."""
    GENERATION[0] += 1
    for name in set(sys.modules) - _BEFORE[0]:
        mod = sys.modules.get(name)
        if mod is None or not (name == "jax" or name.startswith("jax.")):
            continue
        for attr, value in list(vars(mod).items()):
            if inspect.isfunction(value) or type(value).__name__ in ("Wrapper", "PlainWrapper"):
                original = getattr(value, "__jaxplace_original__", None)
                if original is not None:
                    setattr(mod, attr, original)
