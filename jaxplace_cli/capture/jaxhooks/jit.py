"""``jax.jit`` while hooks are installed: a recording, transparent ``JitFunction``.

Each jitted function gets a name that is unique per function identity in the process
(``jit_name``): what steps and recompiles are keyed on.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys

from jax.tree_util import tree_leaves

from jaxplace_cli.capture import frames
from jaxplace_cli.capture.jaxhooks import dispatch
from jaxplace_cli.capture.jaxhooks.common import JitProxy
from jaxplace_cli.capture.jaxhooks.dispatch import (
    CallSpec,
    _EvalTrace,
    _trace_now,
    record_call,
)
from jaxplace_cli.capture.jaxhooks.legs import inner_call
from jaxplace_cli.capture.jaxhooks.memory import donates, donating_call
from jaxplace_cli.capture.jaxhooks.state import active, tls
from jaxplace_cli.model.events import OP_JIT


def jit_function(jitted, spec: CallSpec):
    """What ``jax.jit`` returns while hooks are installed: ``capture/_wrap.c``'s ``JitFunction``
    (the same decisions as the class below, without its Python frame; the measured cost is in
    that file's header), or the class below for a function that donates (its frees are recorded
    around the call) and where the extension is not loaded."""
    if dispatch.c_jit_function is None or donates(jitted):
        return JitFunction(jitted, spec)
    return _looks_like(dispatch.c_jit_function(jitted, spec, record_call,
                                                (tuple(spec.static_argnums), tuple(spec.static_argnames))),
                       jitted)


def _looks_like(wrapper, jitted):
    """``wrapper`` with the jitted function's name, doc and attributes, and its ``__wrapped__``
    the user's function (as on a plain ``jax.jit``)."""
    try:
        functools.update_wrapper(wrapper, jitted)
    except Exception:
        pass
    inner = getattr(jitted, "__wrapped__", None)
    if inner is not None:
        wrapper.__wrapped__ = inner
    return wrapper


class JitFunction(JitProxy):
    """What ``jax.jit`` returns while hooks are installed (``jit_function``): records each call,
    forwards the rest.

    Transparent where JAX code and tests look: attributes (``lower``, ``trace``,
    ``eval_shape``, ``clear_cache``...) come from the real jitted function, ``__wrapped__`` is
    the user's function (as on a plain ``jax.jit``), ``__getstate__`` and pickling are the
    jitted function's own (a plain ``jax.jit`` object pickles, or fails to, exactly so), and
    ``__get__`` keeps ``@jax.jit`` methods working. What cannot be hidden: ``type()`` is not
    ``PjitFunction``, and a call adds two Python frames to the raw stack (JAX's filtered
    tracebacks drop them: jaxplace's package is registered as a traceback exclusion).
    """

    __slots__ = ("_jitted", "_spec", "_donates", "__dict__", "__weakref__")

    def __init__(self, jitted, spec: CallSpec):
        self._jitted = jitted
        self._spec = spec
        self._donates = donates(jitted)  # its donated arguments are freed by a call
        _looks_like(self, jitted)

    def __call__(self, *args, **kwargs):
        try:
            if active.rec is None or type(_trace_now.value) is not _EvalTrace:
                return self._jitted(*args, **kwargs)
            if tls.depth:  # called inside another recorded op: its host arguments are legs of it
                spec = self._spec
                return inner_call(self._jitted, args, kwargs, spec.static_argnums, spec.static_argnames)
            if self._donates:  # the donated arguments are freed by the call (issue 27)
                return donating_call(record_call, self._spec, self._jitted, args, kwargs)
            return record_call(self._spec, self._jitted, args, kwargs)
        except Exception as exc:
            frames.drop_own(exc)
            raise



def _static_names(fun, static_argnums, static_argnames):
    nums = static_argnums if static_argnums is not None else ()
    names = static_argnames if static_argnames is not None else ()
    if isinstance(nums, int):
        nums = (nums,)
    if isinstance(names, str):
        names = (names,)
    nums, names = set(nums), set(names)
    try:  # jax.jit accepts either form and infers the other from the signature
        params = list(inspect.signature(fun).parameters)
        nums |= {params.index(n) for n in names if n in params}
        names |= {params[i] for i in nums if 0 <= i < len(params)}
    except (TypeError, ValueError):
        pass
    return tuple(sorted(nums)), tuple(sorted(names))


_JIT_OWNER: dict = {}  # "jit(f)" -> identity of the first function recorded under it
_JIT_NAMES: dict = {}  # identity -> its recorded name


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    """Where third-party and JAX code lives: a jitted function defined there is a library's
    wrapper (equinox's ``fun_wrapped``), not what the user wrote."""
    import sysconfig

    import jax

    paths = sysconfig.get_paths()
    dirs = {os.path.join(paths[k], "") for k in ("purelib", "platlib") if k in paths}
    dirs.add(os.path.join(os.path.dirname(os.path.dirname(jax.__file__)), ""))
    return tuple(dirs)


def _unwrap(fun):
    """Through ``functools.partial`` and ``__wrapped__`` chains (``functools.wraps``,
    ``nnx.jit``'s ``JitFn``) to the innermost callable."""
    f, seen = fun, set()
    while id(f) not in seen:
        seen.add(id(f))
        if isinstance(f, functools.partial):
            f = f.func
            continue
        try:
            inner = f.__dict__.get("__wrapped__") if hasattr(f, "__dict__") else None
        except Exception:
            inner = None
        if inner is None or not callable(inner):
            break
        f = inner
    return f


def _from_callers(f):
    """The user's function behind a library's wrapper ``f`` whose code is the library's own:
    equinox compiles one ``fun_wrapped`` for every ``filter_jit`` function and only renames it,
    the user's function being a local of a calling frame (``filter_jit(fun)``). Found by its
    qualified name among the locals of the (library) frames that called ``jax.jit``."""
    want = getattr(f, "__qualname__", None)
    lib = _library_dirs()
    own = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(own):
        frame = frame.f_back
    for _ in range(16):
        if frame is None or not frame.f_code.co_filename.startswith(lib):
            return None
        for _, v in frames.local_items(frame):
            if v is f or not callable(v):
                continue
            u = _unwrap(v)
            code = getattr(u, "__code__", None)
            if (code is not None and getattr(u, "__qualname__", None) == want
                    and not code.co_filename.startswith(lib)):
                return u
        frame = frame.f_back
    return None


def user_function(fun):
    """What the user wrote behind the callable ``jax.jit`` got: through partials and
    ``__wrapped__`` chains, and past a library's renamed wrapper (``eqx.filter_jit``)."""
    f = _unwrap(fun)
    code = getattr(f, "__code__", None)
    if code is not None and code.co_filename.startswith(_library_dirs()) and code.co_name != getattr(f, "__name__", code.co_name):
        try:
            return _from_callers(f) or f
        except Exception:
            return f
    return f


def _identity(f):
    """(identity key, definition file, line) of a user function ``f`` (user_function): its
    code object's place (a function re-created in a loop, a lambda, a closure of one ``def``:
    one identity — they compile the same code) and its qualified name (a library that renames
    one wrapper per function is as many functions), else its type."""
    code = getattr(f, "__code__", None)
    if code is not None:
        key = (code.co_filename, code.co_firstlineno, getattr(f, "__qualname__", code.co_name))
        return key, code.co_filename, code.co_firstlineno
    t = type(f)
    return (t.__module__, t.__qualname__, getattr(f, "__name__", "")), "", 0


def jit_name(fun) -> str:
    """``jit(f)``, as JAX names it, ``f`` the function the user wrote (user_function) —
    unless another function already took that name in this process: then
    ``jit(f) [model.py:12]`` (where it is defined). Steps and recompiles are keyed on this
    name, so on function identity: three different functions named ``f`` are three functions,
    not one compiled three times."""
    f = user_function(fun)
    base = f"jit({getattr(f, '__name__', None) or type(f).__name__})"
    key, file, line = _identity(f)
    name = _JIT_NAMES.get(key)
    if name is None:
        owner = _JIT_OWNER.setdefault(base, key)
        name = base if owner == key else f"{base} [{os.path.basename(file) or '?'}:{line}]"
        _JIT_NAMES[key] = name
    return name


def make_jit(original_jit):
    """Replacement for ``jax.jit`` that returns a recording JitFunction."""

    @functools.wraps(original_jit)
    def jit(fun=None, *args, **kwargs):
        if fun is None:  # decorator factory form: @jax.jit(static_argnames=...)
            return lambda f: jit(f, *args, **kwargs)
        jitted = original_jit(fun, *args, **kwargs)
        nums, names = _static_names(fun, kwargs.get("static_argnums"), kwargs.get("static_argnames"))
        spec = CallSpec(jit_name(fun), OP_JIT, scalar_operands=True, flatten=True,
                        static_argnums=nums, static_argnames=names)
        return jit_function(jitted, spec)

    jit.__jaxplace_original__ = original_jit
    return jit


def install_compiled(patch, report) -> None:
    """``jax.stages.Compiled.__call__`` (``jax.jit(f).lower(x).compile()``, called ahead of time):
    a jit call each, named as the function's jit. JAX runs the first call on its Python path,
    which the hooks saw, and every later one in C++, which they did not: a loop of 3 calls of a
    NumPy argument recorded 1 leg of the guard's 3 (found 2026-12-06). Its dropped arguments
    are read from its executable (legs.py), its donated ones from its ``args_info``."""
    import weakref

    from jax._src import stages

    original = stages.Compiled.__dict__.get("__call__")
    if not inspect.isfunction(original):
        return
    specs = weakref.WeakKeyDictionary()

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        try:
            if active.rec is None or type(_trace_now.value) is not _EvalTrace:
                return original(self, *args, **kwargs)
            call = original.__get__(self)
            if tls.depth:  # called inside another recorded op: its host arguments are legs of it
                return inner_call(call, args, kwargs)
            entry = specs.get(self)
            if entry is None:
                entry = specs[self] = _compiled_entry(self)
            spec, donating = entry
            if donating:  # the donated arguments are freed by the call (issue 27)
                return donating_call(record_call, spec, call, args, kwargs)
            return record_call(spec, call, args, kwargs)
        except Exception as exc:
            frames.drop_own(exc)
            raise

    __call__.__code__ = frames.shimmed(__call__.__code__)  # warnings name the user's line
    patch(stages.Compiled, "__call__", __call__)
    report.installed.append("jax.stages.Compiled.__call__")


def _compiled_entry(compiled):
    """``(spec, donates)`` of a compiled function's calls (one that returns no array, a
    ``jax.new_ref`` update as JAX's own ``thread_map`` compiles, too: inputs.resultless)."""
    try:
        donated = any(getattr(a, "donated", False) for a in tree_leaves(compiled.args_info))
    except Exception:  # another JAX
        donated = False
    spec = CallSpec(_compiled_name(compiled), OP_JIT, scalar_operands=True, flatten=True)
    spec.placed_by_jax = True  # compiled for its devices: a policy moving its data would break it
    return spec, donated


def _compiled_name(compiled) -> str:
    """The name of the function's jit calls (``jit_name``: ``jit(f) [model.py:12]`` where
    another ``f`` took ``jit(f)``), found by where the function is defined (JAX's debug info,
    ``f at FILE:LINE``); else ``jit(f)``, as JAX names the compiled program's call; ``compiled``
    where it cannot be told. Two functions named ``f`` compiled ahead of time were one ``jit(f)``
    (steps and recompiles are keyed on the name)."""
    try:
        base = str(compiled._executable.unsafe_call.name)
    except Exception:  # another JAX, another executable
        return "compiled"
    try:
        fname, _, where = compiled._executable._all_args_info.debug_info.func_src_info.rpartition(" at ")
        file, _, line = where.rpartition(":")
        key = (file, int(line))
    except Exception:  # another JAX: its debug info differs
        return base
    # the name too: a library's one wrapper for every function (equinox's filter_jit) is one place
    # under many names, and its own jitted helper there took another name (a review)
    names = {name for k, name in _JIT_NAMES.items() if k[:2] == key and str(k[2]).rpartition(".")[2] == fname}
    return names.pop() if len(names) == 1 else base
