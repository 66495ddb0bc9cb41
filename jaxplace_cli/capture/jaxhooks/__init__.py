"""The only package that touches JAX internals.

``install()`` patches each entry point it can and returns a ``HookReport`` naming what it installed
and what this JAX version did not allow (why); a hook that fails to install is skipped, never
fatal. ``uninstall()`` restores every original object. Both are called from one place only,
``capture/recording.py`` (``Recording``, reference counted); ``tests/test_layout.py`` checks it.

Entry points hooked (see dispatch.py for why these and not primitives alone):
``jax.jit`` (jit.py); public functions of ``jax.numpy`` (+ ``linalg``, ``fft``), ``jax.scipy``
(``linalg``, ``special``, ``signal``, ``fft``, ``ndimage``, ``sparse.linalg``), ``jax.nn``,
``jax.random``; ``jax.numpy.ufunc.__call__``; Array operators and methods (methods.py); primitives bound
eagerly (``EvalTrace.process_primitive``); the explicit placement APIs ``jax.device_put`` and
``jax.make_array_from_*`` with their per-device legs (uploads.py); host callbacks
(callbacks.py); ``jax.device_get``; ``Array._value`` (every host read),
``Array.copy_to_host_async``, ``Array.block_until_ready`` (transfers.py, syncs.py); ``Array.delete`` (memory.py).
"""
from __future__ import annotations

import os
import types
from dataclasses import dataclass, field

from jaxplace_cli.capture.jaxhooks import state
from jaxplace_cli.capture.memory import sample_step_stats
from jaxplace_cli.model.events import OP_JNP, OP_PRIM


@dataclass
class HookReport:
    installed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (hook, reason)
    jax_version: str = ""


_PATCHES: list[tuple[object, str, object]] = []  # (owner, attribute, original)
_LISTENERS: list = []  # jax.monitoring listeners to unregister

# NumPy entry points that read a jax.Array without entering jax on the CPU backend.
NUMPY_READERS = ("asarray", "array", "asanyarray", "ascontiguousarray")

def _patch(owner, attr: str, new) -> None:
    original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
    setattr(owner, attr, new)
    _PATCHES.append((owner, attr, original))


def _install_modules(report: HookReport) -> None:
    from jaxplace_cli.capture.jaxhooks import modules

    modules.install(_patch, report)


def _install_ufunc(report: HookReport) -> None:
    from jax._src import core
    from jax.numpy import ufunc

    from jaxplace_cli.capture.jaxhooks import legs
    from jaxplace_cli.capture.jaxhooks.common import _trace_now
    from jaxplace_cli.capture.jaxhooks.dispatch import CallSpec, fast_hook, record_call

    original = ufunc.__dict__["__call__"]
    specs: dict[str, CallSpec] = {}
    active, tls, trace_now, eval_trace = state.active, state.tls, _trace_now, core.EvalTrace
    bind = types.MethodType

    def __call__(self, *args, **kwargs):
        # is_recording(), inlined: every `x * y` passes here inside its operator's hook
        if active.rec is None or type(trace_now.value) is not eval_trace:
            return original(self, *args, **kwargs)
        if tls.depth:  # inside an operator (x * 2.0): the ufunc's jit uploads the 2.0
            return legs.inner_call(original, (self, *args), kwargs)
        name = self.__name__
        spec = specs.get(name)
        if spec is None:
            spec = specs[name] = CallSpec(name, OP_JNP, scalar_operands=True)
        # bound: the operands alone are the call's arguments. With the ufunc among them the C
        # hot path handed every direct call (jnp.add(x, y)) to the Python rows (bench/README.md
        # round 19 has the cost); rows unchanged
        return record_call(spec, bind(original, self), args, kwargs)

    _patch(ufunc, "__call__", fast_hook(original, __call__))  # the forwarding cases in C
    report.installed.append("jax.numpy.ufunc.__call__")


def _install_array_methods(report: HookReport) -> None:
    from jaxplace_cli.capture.jaxhooks import methods

    methods.install(_patch, report)


def in_backward_pass() -> bool:
    """True while JAX evaluates a transpose (backward pass): its name stack says so."""
    try:
        from jax._src import source_info_util

        return "transpose" in str(source_info_util.current_name_stack())
    except Exception:
        return False


def _install_process_primitive(report: HookReport) -> None:
    from jax._src import core
    from jax._src.array import ArrayImpl

    from jaxplace_cli.capture.jaxhooks import legs
    from jaxplace_cli.capture.jaxhooks.dispatch import CallSpec, record_call

    original = core.EvalTrace.__dict__["process_primitive"]
    specs: dict = {}
    slice_p = _eager_slice_primitive()

    def process_primitive(self, primitive, args, params, /):
        if state.active.rec is None:
            return original(self, primitive, args, params)
        n = len(args)
        real, dropped = args, legs.dropped_host_args(primitive, params, args) if primitive.name == "jit" else ()
        if dropped:  # shown to the recording as None (no leg); the call gets the real ones
            args = tuple(None if i in dropped else a for i, a in enumerate(args))
        if primitive is slice_p and params.get("strides") is None:
            # eager lax.slice runs as a dynamic_slice of its start indices, each uploaded (as
            # x[1:3] uploads them: dispatch.index_uploads); they are parameters, no operand
            args = (*args, *legs.python_ints(params.get("start_indices", ())))
        if state.tls.depth:  # bound inside a recorded op: its host operands are that op's legs
            op = state.tls.op
            if op is None or state.tls.depth == 2:
                return original(self, primitive, real, params)
            for a in args:
                if type(a) is not ArrayImpl:
                    break
            else:  # arrays only, no leg to add: what legs.inner_call decides, without its closure
                return original(self, primitive, real, params)  # and walk (x.reshape(16); round 20)
            if len(args) > n and op[6].index:  # x[1:3]: its op counted the start indices
                args = args[:n]
            return legs.inner_call(lambda *a: original(self, primitive, _real(a[:n], real, dropped), params),
                                   tuple(args), {})
        spec = specs.get(primitive)
        if spec is None:
            spec = specs[primitive] = CallSpec(primitive.name, OP_PRIM, scalar_operands=True)

        def run(*a):
            return original(self, primitive, _real(a[:n], real, dropped), params)

        return record_call(spec, run, tuple(args), {}, backward=in_backward_pass())

    _patch(core.EvalTrace, "process_primitive", process_primitive)
    report.installed.append("EvalTrace.process_primitive")


def _real(args, real, dropped):
    """The primitive's arguments with the host values the recording was shown as None back."""
    return args if not dropped else tuple(real[i] if i in dropped else a for i, a in enumerate(args))


def _eager_slice_primitive():
    """``lax.slice_p`` where its eager impl is jax 0.10's ``_slice_impl`` (unit strides: a
    ``dynamic_slice`` of the start indices, one upload each), else None (nothing assumed)."""
    try:
        from jax._src.lax import slicing

        impl = slicing.slice_p.impl
        if getattr(impl, "__name__", "") == "_slice_impl" and "dynamic_slice_p" in impl.__code__.co_names:
            return slicing.slice_p
    except (ImportError, AttributeError):
        pass
    return None


def _install_jit(report: HookReport) -> None:
    import jax

    from jaxplace_cli.capture.jaxhooks.jit import install_compiled, make_jit

    _patch(jax, "jit", make_jit(jax.jit))
    report.installed.append("jax.jit")
    install_compiled(_patch, report)
    from jaxplace_cli.capture.jaxhooks import memory  # frees by .delete() (issue 27)
    memory.install(_patch, report)


def _install_transfers(report: HookReport) -> None:
    import jax
    from jax._src.array import ArrayImpl

    from jaxplace_cli.capture.jaxhooks.transfers import (
        make_block_until_ready,
        make_copy_to_host_async,
        make_device_get,
        make_numpy_reader,
        make_value_property,
    )

    _patch(jax, "device_get", make_device_get(jax.device_get))
    report.installed.append("jax.device_get")
    value = ArrayImpl.__dict__["_value"]
    if not isinstance(value, property):
        raise TypeError("ArrayImpl._value is not a property on this JAX version")
    _patch(ArrayImpl, "_value", make_value_property(value))
    _patch(ArrayImpl, "copy_to_host_async", make_copy_to_host_async(ArrayImpl.copy_to_host_async))
    report.installed.append("Array._value (host reads), Array.copy_to_host_async")
    _patch(ArrayImpl, "block_until_ready", make_block_until_ready(ArrayImpl.block_until_ready))
    report.installed.append("Array.block_until_ready (waits)")
    import numpy as np

    for name in NUMPY_READERS:
        _patch(np, name, make_numpy_reader(getattr(np, name), f"np.{name}()"))
    report.installed.append("numpy." + "/".join(NUMPY_READERS) + " (host reads on CPU)")


def _install_uploads(report: HookReport) -> None:
    from jaxplace_cli.capture.jaxhooks import uploads

    uploads.install(_patch, report)


def _install_callbacks(report: HookReport) -> None:
    from jaxplace_cli.capture.jaxhooks import callbacks

    callbacks.install(_patch, report)


def _install_step_annotation(report: HookReport) -> None:
    """``jax.profiler.StepTraceAnnotation`` marks the user's own steps: record a marker at
    each step's start and end so audits use the user's step boundaries."""
    import jax.profiler

    original = jax.profiler.StepTraceAnnotation

    class StepTraceAnnotation(original):
        __doc__ = original.__doc__

        def __init__(self, name: str, **kwargs):
            super().__init__(name, **kwargs)
            self._jaxplace_label = f"{name}\t{kwargs.get('step_num', '')}"

        def __enter__(self):
            rec = state.active.rec
            if rec is not None:
                rec.marker("step-begin", self._jaxplace_label)
            return super().__enter__()

        def __exit__(self, *exc):
            if (rec := state.active.rec) is not None:
                sample_step_stats(rec)  # memory_stats() where the backend has them (issue 27); never raises
                rec.marker("step-end", self._jaxplace_label)
            return super().__exit__(*exc)

    _patch(jax.profiler, "StepTraceAnnotation", StepTraceAnnotation)
    report.installed.append("jax.profiler.StepTraceAnnotation")


def _install_compile_listener(report: HookReport) -> None:
    """Every XLA compilation, with the signature of the call that triggered it: what the
    ``recompile`` finding compares (shapes, dtypes, weak types, static args, devices)."""
    import jax.monitoring

    from jaxplace_cli.capture.jaxhooks.compiles import on_duration_event

    jax.monitoring.register_event_duration_secs_listener(on_duration_event)
    _LISTENERS.append(on_duration_event)
    report.installed.append("jax.monitoring compile events")


def _install_debug_callback(report: HookReport) -> None:
    """``jax.debug.callback`` shows the callback where a placement policy put its arguments
    (debug_callback.py; issue 14)."""
    import jax.debug

    from jaxplace_cli.capture.jaxhooks.debug_callback import make_debug_callback

    _patch(jax.debug, "callback", make_debug_callback(jax.debug.callback))
    report.installed.append("jax.debug.callback (placed arguments)")


INSTALLERS = (
    ("transfers", _install_transfers),
    ("uploads", _install_uploads),
    ("callbacks", _install_callbacks),
    ("jit", _install_jit),
    ("modules", _install_modules),
    ("ufunc", _install_ufunc),
    ("array-methods", _install_array_methods),
    ("eager-primitives", _install_process_primitive),
    ("step-annotation", _install_step_annotation),
    ("compile-events", _install_compile_listener),
    ("debug-callback", _install_debug_callback),
)


# What ``--record transfers`` leaves out: the per-op wrappers of eager code.
EAGER_OP_HOOKS = ("modules", "ufunc", "array-methods", "eager-primitives")


def install(record: str = "all") -> HookReport:
    """Install every hook this JAX version allows, inert until ``capture.recording`` sets
    ``state.active.rec``.

    ``record="transfers"``: skip the eager-op wrappers (jax.numpy functions, Array operators,
    eagerly bound primitives). jit calls, device_put/get and host reads are still recorded,
    so every transfer they cause is; eager ops and their implicit uploads are not."""
    import jax

    report = HookReport(jax_version=jax.__version__)
    if _PATCHES:
        uninstall()
    for name, installer in INSTALLERS:
        if record == "transfers" and name in EAGER_OP_HOOKS:
            continue
        try:
            installer(report)
        except Exception as exc:  # a JAX version without this entry point: fall back
            report.failed.append((name, f"{type(exc).__name__}: {exc}"))
    try:  # jaxplace's frames out of JAX's filtered tracebacks and of what JAX takes for the user's
        # line (jax_explain_cache_misses' "at FILE:LINE", MLIR locations named jaxplace's jit.py)
        from pathlib import Path

        from jax._src import source_info_util, traceback_util

        from jaxplace_cli.capture.frames import SHIM

        own = str(Path(__file__).resolve().parents[2])
        traceback_util.register_exclusion(own)
        for path in (own + os.sep, SHIM):
            if path not in source_info_util._exclude_paths:
                source_info_util.register_exclusion(path)
    except Exception as exc:
        report.failed.append(("traceback-filter", f"{type(exc).__name__}: {exc}"))
    return report


def uninstall() -> None:
    """Deactivate recording and restore every patched attribute (last patched first)."""
    state.active.rec = None
    from jaxplace_cli.capture.jaxhooks import modules

    modules.uninstalled()  # a module imported later is no longer wrapped; none imported meanwhile keeps one
    while _LISTENERS:
        try:
            import jax.monitoring

            jax.monitoring.unregister_event_duration_listener(_LISTENERS.pop())
        except Exception:
            pass
    while _PATCHES:
        owner, attr, original = _PATCHES.pop()
        try:
            setattr(owner, attr, original)
        except Exception:
            pass
