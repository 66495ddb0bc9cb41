"""Helpers the hook modules share, below all of them: what a value costs to move, whether a
hooked call records, the name of the API a user called, a jit call's sharded uploads.

Here so that ``dispatch``, ``transfers`` and ``uploads`` import one module below them and
none of each other (they did, in a circle: issue 23).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from types import MethodType as _MethodType

import jax
import numpy as np
from jax._src import core as _core
from jax._src.array import ArrayImpl
from jax.tree_util import tree_leaves, tree_structure

from jaxplace_cli.capture.jaxhooks.state import active, static_positions, tls
from jaxplace_cli.capture.recorder import _nbytes

_trace_ctx = _core.trace_ctx
_EvalTrace = _core.EvalTrace


class _CurrentTrace:
    """``trace_ctx.trace`` as ``.value``: where ``_trace_now`` cannot be JAX's own holder."""

    @property
    def value(self):
        return _trace_ctx.trace


def _plain_property(prop, names: tuple[str, ...]) -> bool:
    """``prop`` is a property whose getter only reads ``names`` (``return self._sharding``,
    ``return trace_state_strong_ref.value``): what it returns can be read without its Python
    frame. Checked on its code, so a JAX whose property does more keeps the property."""
    fget = getattr(prop, "fget", None)
    code = getattr(fget, "__code__", None)
    return (type(prop) is property and code is not None and code.co_argcount == 1
            and code.co_nlocals == 1 and code.co_names == names and fget.__closure__ is None)


def _trace_holder():
    """What every hook reads to know whether JAX is tracing: ``_trace_now.value`` is JAX's
    current trace. ``trace_ctx.trace`` is a property whose body is ``return
    trace_state_strong_ref.value``; reading that holder's ``value`` directly saves the
    property's Python frame (61 -> 28 ns; ~1.7 reads an eager op, issue 29). A JAX whose
    property reads anything else keeps the property (``_CurrentTrace``)."""
    prop = type(_trace_ctx).__dict__.get("trace")
    holder = getattr(_core, "trace_state_strong_ref", None)
    if (_plain_property(prop, ("trace_state_strong_ref", "value"))
            and prop.fget.__globals__ is vars(_core) and holder is not None):
        try:
            if holder.value is _trace_ctx.trace:
                return holder
        except Exception:
            pass
    return _CurrentTrace()


_trace_now = _trace_holder()

# Bytes a Python scalar operand uploads: it becomes a weakly typed 32-bit value, or 64-bit
# with x64 enabled (bool: 1 byte either way). Indexed by x64_enabled().
_SCALAR_BYTES = ({float: 4, int: 4, bool: 1, complex: 8}, {float: 8, int: 8, bool: 1, complex: 16})


def _x64_reader():
    """(JAX's ``jax_enable_x64`` holder or None, a function reading it now): a script may enable
    x64 after the hooks are installed. The holder is ~3x cheaper to read than
    ``jax.config.jax_enable_x64``; the C hot path reads its ``value`` itself (no frame)."""
    try:
        from jax._src.config import enable_x64

        enable_x64.value  # noqa: B018 - fails here, not per op, if the holder changed
        return enable_x64, lambda: bool(enable_x64.value)
    except Exception:
        return None, lambda: bool(jax.config.jax_enable_x64)


_x64_now, x64_enabled = _x64_reader()

_DEVICE_ITEMSIZE: dict = {}  # (host dtype, x64) -> itemsize of the dtype JAX uploads it as


def upload_nbytes(a) -> int:
    """Bytes a device receives for host data ``a`` (numpy array or scalar): its size at the
    dtype JAX canonicalises it to. With x64 off (the default) float64 and int64 arrive as
    float32 and int32: ``f(np.ones((1000, 1000)))`` uploads 4,000,000 B, not the host's 8,000,000."""
    dtype = a.dtype
    key = (dtype, x64_enabled())
    size = _DEVICE_ITEMSIZE.get(key)
    if size is None:
        try:
            from jax._src import dtypes

            size = np.dtype(dtypes.canonicalize_dtype(dtype)).itemsize
        except Exception:  # not a dtype JAX accepts: the call fails anyway
            size = dtype.itemsize
        _DEVICE_ITEMSIZE[key] = size
    return int(a.size) * size


def array_nbytes(a) -> int:
    aval = a.aval
    return _nbytes(aval.shape, aval.dtype)


def is_recording() -> bool:
    """True when a hooked call here should record (not nested, not tracing)."""
    return (active.rec is not None and not tls.depth
            and type(_trace_now.value) is _EvalTrace)


# Wrapper frames between the user and the function they called: the callable they wrap
# (a closure variable of the frame) is the API's name.
_WRAPPER_FRAMES = frozenset({"reraise_with_filtered_traceback", "wrapper", "wrapped", "_wrapped",
                             "__call__", "cache_miss", "api_boundary"})

# Array operator (its dunder name without the underscores) -> the label of a transfer it makes:
# as the user wrote it (issue 24), never JAX's internal function. The op keeps its jax.numpy
# name (``add``, ``matmul``): policies and rules files match on that.
OPERATOR_LABELS = {
    "add": "x + y", "radd": "x + y", "sub": "x - y", "rsub": "x - y", "mul": "x * y",
    "rmul": "x * y", "truediv": "x / y", "rtruediv": "x / y", "floordiv": "x // y",
    "rfloordiv": "x // y", "mod": "x % y", "rmod": "x % y", "divmod": "divmod(x, y)",
    "rdivmod": "divmod(x, y)", "pow": "x ** y", "rpow": "x ** y", "matmul": "x @ y",
    "rmatmul": "x @ y", "and": "x & y", "rand": "x & y", "or": "x | y", "ror": "x | y",
    "xor": "x ^ y", "rxor": "x ^ y", "lshift": "x << y", "rlshift": "x << y", "rshift": "x >> y",
    "rrshift": "x >> y", "neg": "-x", "pos": "+x", "abs": "abs(x)", "invert": "~x",
    "eq": "x == y", "ne": "x != y", "lt": "x < y", "le": "x <= y", "gt": "x > y", "ge": "x >= y",
    "getitem": "x[i]", "round": "round(x)",
}

# Binary operators that are one dispatch of their own two operands (a ufunc or a jitted
# jax.numpy function: ``x + 1.0`` is ``ufuncs.add(x, 1.0)``), so each host operand is exactly
# one leg per device, counted at the operator by the hot path (C where it loads) and not again
# by the dispatch inside (CallSpec.depth). Not here: ``x ** 2`` (integer_pow, the 2 is a
# parameter), ``x[i]`` (dispatch.index_uploads and the gather path), ``x @ y``, ``round(x)``.
OPERATORS_ONE_DISPATCH = frozenset({
    "add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv",
    "mod", "rmod", "divmod", "rdivmod", "and", "rand", "or", "ror", "xor", "rxor", "lshift",
    "rlshift", "rshift", "rrshift", "eq", "ne", "lt", "le", "gt", "ge"})

# JAX's modules -> the public prefix a user calls their functions by (most specific first)
_PUBLIC_MODULES = (("jax._src.numpy", "jnp."), ("jax.numpy", "jnp."), ("jax._src.random", "jax.random."),
                   ("jax._src.scipy", "jax.scipy."), ("jax._src.nn.initializers", "jax.nn.initializers."),
                   ("jax._src.nn", "jax.nn."), ("jax._src.lax", "jax.lax."), ("jax._src.tree", "jax.tree."),
                   ("jax._src.tree_util", "jax.tree_util."))


def public_name(frame) -> str:
    """The name of the function the user called, from the outermost JAX frame below the
    user's: ``jit(f)`` for a jitted function (not its ``reraise_with_filtered_traceback``
    boundary wrapper), else the function's own name; a closure is named by the function that
    made it (``variance_scaling``, not its ``init``: what a user calls)."""
    code = frame.f_code
    name = code.co_name
    if name not in _WRAPPER_FRAMES:
        qual = getattr(code, "co_qualname", name)
        if ".<locals>." in qual:
            return qual.split(".<locals>.")[0].rsplit(".", 1)[-1]
        return name
    try:
        local = frame.f_locals
    except Exception:
        return name
    for key in ("fun", "fn", "func", "f", "self"):
        obj = local.get(key)
        inner = getattr(obj, "__name__", None)
        if isinstance(inner, str) and inner:
            return f"jit({inner})" if type(obj).__name__ == "PjitFunction" else inner
    qual = getattr(frame.f_code, "co_qualname", name)
    if "." in qual and "<locals>" not in qual:  # Class.__call__ of an object with no name: the class
        return qual.rsplit(".", 2)[-2]
    return name


def _in_jax(frame) -> bool:
    module = frame.f_globals.get("__name__", "")
    return module == "jax" or module.startswith("jax.")


def _public_prefix(module: str) -> str:
    return next((p for m, p in _PUBLIC_MODULES if module == m or module.startswith(m + ".")), "jax.")


def called_api(frame, user, names=None, fallback: str = "jax", outer_jax: bool = True) -> str:
    """The public JAX call behind a hook reached from ``frame``, walking out to the user's (or
    library's) frame ``user``: the outermost frame whose function is in ``names`` (the host
    read APIs: ``__float__`` -> ``float()``); else the outermost function of JAX's own modules,
    named with its public prefix (``jnp.zeros``, ``jax.nn.initializers.variance_scaling``,
    ``jax.vmap`` rather than its ``api_boundary`` wrapper); else ``fallback``. Frames of the
    standard library, NumPy or jaxplace between them (a ``contextlib`` decorator's ``inner``,
    a ``Thread.run``) never name it: they are nobody's API (issue 24 found ``jax.inner``,
    ``jax.run``, ``jax.__call__``)."""
    named = None
    jax_frames = []  # inner to outer
    f = frame
    while f is not None and f is not user:
        if names is not None and f.f_code.co_name in names:
            named = f
        elif outer_jax and _in_jax(f):
            jax_frames.append(f)
        f = f.f_back
    if named is not None:
        return names[named.f_code.co_name]
    for f in reversed(jax_frames):  # outermost first; a wrapper names only a jitted function
        name = public_name(f)
        if name.startswith("jit("):
            return name
        if f.f_code.co_name == "cache_miss":  # a jitted function's slow path: fun is the user's
            return f"jit({name})"
        if f.f_code.co_name in _WRAPPER_FRAMES and f is not jax_frames[0]:
            continue
        return _public_prefix(f.f_globals.get("__name__", "")) + name
    return fallback


# jitted function -> {its call's signature: its input shardings}; weak: a function's entries go
# with it (an id reused by a new function would have handed it the old one's)
_IN_SHARDINGS = weakref.WeakKeyDictionary()


def input_shardings(fn, spec, args, kwargs, leaves) -> list:
    """The compiled program's input sharding of each of the jit call's dynamic argument
    ``leaves`` (None: an argument it dropped), from ``fn.lower(...).compile()`` right after the
    call (the trace and the executable are cached: ~0.25 ms, no new trace, no compile event);
    a compiled function's own. Once per everything that decides them: the arguments' structure,
    each leaf's shape, dtype, sharding and commitment, the static values, the default device
    (the user's ``jax.default_device``, or the policy's that ran it), the mesh in effect.
    Flattened by the program's own argument tree: a ``None`` argument is no leaf of it. Raises
    where it cannot be told (one place for it: the legs of sharded and resultless calls,
    inputs.py, and which arguments the program dropped, ``kept_leaves``)."""
    kwargs = kwargs or {}
    compiled = getattr(fn, "__self__", fn)  # a compiled function's call is its bound __call__
    if isinstance(compiled, jax.stages.Compiled):
        shardings = compiled.in_tree.flatten_up_to(compiled.input_shardings)
    else:
        device = getattr(fn, "default_device", None)  # a policy runs it there (engine._on_device)
        fn = getattr(fn, "__wrapped__", fn) if device is not None else fn
        static = static_positions(spec.static_argnums, len(args)) if spec.static_argnums else ()
        key = (device, jax.config.jax_default_device, _context_mesh(), tree_structure((args, kwargs)),
               tuple((getattr(x, "shape", None), getattr(x, "dtype", type(x)), getattr(x, "sharding", None),
                      getattr(x, "_committed", None)) for x in leaves),
               tuple(args[i] for i in sorted(static)), tuple(kwargs.get(k) for k in spec.static_argnames or ()))
        known = _IN_SHARDINGS.get(fn)
        if known is None:
            known = _IN_SHARDINGS[fn] = {}
        shardings = known.get(key)
        if shardings is None:
            with jax.default_device(device) if device is not None else contextlib.nullcontext():
                compiled = fn.lower(*args, **kwargs).compile()  # (the user's own default device stands)
            shardings = compiled.in_tree.flatten_up_to(compiled.input_shardings)
            if len(shardings) == len(leaves):
                if len(known) > 256:  # a function called with ever new shapes or static values
                    known.clear()
                known[key] = shardings
    if len(shardings) != len(leaves):
        raise ValueError("the input shardings do not match the arguments")
    return shardings


def _context_mesh():
    """The meshes a ``P(...)`` in_shardings resolves against: ``jax.set_mesh``'s and ``with mesh:``'s."""
    try:
        from jax._src import mesh as mesh_lib

        return mesh_lib.get_concrete_mesh(), mesh_lib.thread_resources.env.physical_mesh
    except Exception:  # another JAX
        return None


# id(jitted fn) -> [weakref to it, dropped an argument in some signature, its _cache_size() then], gone
# with it. No WeakKeyDictionary: its get() is a Python call making a weakref (a third of this path)
_KEPT: dict = {}


def kept_leaves(fn, spec, args, kwargs):
    """``(kept, leaves)``: the indexes of the jit call's dynamic argument leaves that its compiled
    program keeps (None: all of them, or it cannot be told), and those leaves when ``kept`` is
    not None. JAX drops an argument the function does not use (``keep_unused=False``) and never
    uploads it, so a NumPy argument there is no leg (diffrax's backward solve passes such a
    constant; the guard logs nothing for it): the None entries of ``input_shardings``. Most
    functions drop nothing: while a function has dropped nothing in any signature, and JAX
    compiled no new one for it (``_cache_size``), the answer is None at the cost of that one
    call (flattening the flax LIB step's arguments for the key took ~65 us a NumPy argument)."""
    try:
        state = _KEPT.get(id(fn))
        size = fn._cache_size()
        if state is not None and state[2] == size and state[1] is False:  # (an entry leaves with its fn)
            return None, ()
        static = static_positions(spec.static_argnums, len(args))
        dyn = [x for i, x in enumerate(args) if i not in static]
        dyn_kw = {k: v for k, v in kwargs.items() if k not in spec.static_argnames}
        leaves = tree_leaves((dyn, dyn_kw))
        shardings = input_shardings(fn, spec, args, kwargs, leaves)
        kept = frozenset(i for i, s in enumerate(shardings) if s is not None)
        kept = None if len(kept) >= len(leaves) else kept
        if state is None:
            key = id(fn)
            state = _KEPT[key] = [weakref.ref(fn, lambda _, key=key: _KEPT.pop(key, None)), False, size]
        state[1] = state[1] or kept is not None
        state[2] = size
        return kept, leaves
    except Exception:  # not a jitted function, a deleted (donated) argument, an unhashable static, another JAX
        return None, ()


def recording_failed(exc: Exception) -> None:
    """A hook's own failure, where the recorder may be gone (uninstalled meanwhile): counted on
    the active recorder (Recorder.recording_failed), never raised into the user's program."""
    rec = active.rec
    if rec is not None:
        rec.recording_failed(exc)


def _unwrapped(jitted):
    return jitted


class JitProxy:
    """What a jitted function wrapped by a hook forwards unchanged: attributes (``lower``,
    ``trace``, ``clear_cache``...), method binding (``@jax.jit`` methods), ``repr``, and
    pickling, which is the jitted function's own (it pickles, or fails to, exactly so).
    Subclasses hold it in ``_jitted`` and define ``__call__``."""

    __slots__ = ()

    def __getattr__(self, name):
        return getattr(self._jitted, name)

    def __get__(self, obj, objtype=None):
        # a bound method, as PjitFunction's own __get__ makes: `m.step.__name__`, `m.step ==
        # m.step`, inspect.ismethod (a functools.partial had none of them: AttributeError)
        return self if obj is None else _MethodType(self, obj)

    def __repr__(self):
        return repr(self._jitted)

    def __getstate__(self):
        return self._jitted.__getstate__()

    def __reduce_ex__(self, protocol):
        return _unwrapped, (self._jitted,)

    def __reduce__(self):
        return _unwrapped, (self._jitted,)


class _Unbound:
    """A Python wrapper around a callable that does not bind as a method (a ``custom_jvp``)
    where ``capture/_wrap.c`` is not built: called, it is the wrapper; looked up through a
    class, it stays itself, as the original does."""

    __slots__ = ("_wrapper", "__dict__")

    def __init__(self, wrapper, fn):
        self._wrapper = wrapper
        functools.update_wrapper(self, fn)
        self.__jaxplace_original__ = fn

    def __call__(self, *args, **kwargs):
        return self._wrapper(*args, **kwargs)

    def __reduce__(self):  # pickled by reference, as a function is
        return self.__qualname__

    def __getattr__(self, name):  # what it lacks is the original's: a custom_jvp's defjvp, ...
        original = self.__dict__.get("__jaxplace_original__")
        if original is None:
            raise AttributeError(name)
        return getattr(original, name)


# a jitted function's own API: where the Python wrapper stands in for one (no capture/_wrap.c)
_PASSED_ON = ("lower", "eval_shape", "trace", "clear_cache")


def pass_on(wrapper, fn):
    """``wrapper`` with ``fn``'s own methods where ``fn`` is no Python function (``jnp.sin`` is a
    jitted one: ``jnp.sin.lower(x)`` must work on the wrapper as on it)."""
    if not inspect.isfunction(fn):
        for name in _PASSED_ON:
            method = getattr(fn, name, None)
            if method is not None:
                setattr(wrapper, name, method)
    return wrapper


def _direct_attr(name: str, array_type=ArrayImpl) -> str:
    """What the C path reads for an array's ``name`` (``sharding``, ``committed``): ``_name``
    where ``Array.name`` is the property ``return self._name`` (jax 0.4-0.10: no Python frame,
    sharding 55 -> 24 ns a read, committed 58 -> 24), else ``name`` itself — a JAX whose
    property does more keeps what it does."""
    private = "_" + name
    return private if _plain_property(array_type.__dict__.get(name), (private,)) else name
