"""The two ways an array gives its device memory back while the Python object lives on
(issue 27; the rest is a weakref's callback, capture/memory.py): ``Array.delete()`` and a
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


def donated(args, kwargs) -> None:
    """After a donating jit call: the argument arrays JAX deleted are freed now."""
    rec = active.rec
    if rec is None:
        return
    try:
        for leaf in tree_leaves((args, kwargs)):
            if type(leaf) is ArrayImpl and leaf.is_deleted():
                rec.memory.released(leaf, "donated")
    except Exception as exc:
        rec.recording_failed(exc)
