"""The two ways an array gives its device memory back while the Python object lives on
(issue 27; the rest is the array's watch, capture/memory.py): ``Array.delete()`` and a
buffer donated to a jit call (``donate_argnums``: JAX deletes the argument in C++, no Python
method runs, so the call's arguments are checked after it returns)."""
from __future__ import annotations

from jax._src.array import ArrayImpl
from jax.tree_util import tree_leaves

from jaxplace_cli.capture.jaxhooks.state import active


def install(patch, report) -> None:
    original = ArrayImpl.delete

    def delete(self):
        rec = active.rec
        if rec is not None:
            try:
                if not self.is_deleted():
                    rec.memory.released(self, "delete")
            except Exception as exc:  # recording never changes the call
                rec.recording_failed(exc)
        return original(self)

    delete.__doc__ = getattr(original, "__doc__", None)
    patch(ArrayImpl, "delete", delete)
    report.installed.append("Array.delete (frees)")


def donates(jitted) -> bool:
    """Whether a jitted function donates any argument (its ``_jit_info``; False if unknown)."""
    try:
        info = jitted._jit_info
        return bool(info.donate_argnums or info.donate_argnames)
    except Exception:
        return False


def donating_call(record_call, spec, jitted, args, kwargs):
    """A recorded call of a donating jit function: the argument arrays JAX deleted are freed
    at the call's own seq (its results may reuse their memory: analysis/memory.py counts such
    a free before the call's allocations)."""
    rec = active.rec
    seq = rec.memory.peek(rec.seqs) if rec is not None else None  # the seq the call will draw
    out = record_call(spec, jitted, args, kwargs)
    rec = active.rec
    if rec is None:
        return out
    try:
        for leaf in tree_leaves((args, kwargs)):
            if type(leaf) is ArrayImpl and leaf.is_deleted():
                rec.memory.released(leaf, "donated", seq)
    except Exception as exc:
        rec.recording_failed(exc)
    return out
