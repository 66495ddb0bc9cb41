"""Which host array an upload carried: a data loader's new batch, or the same array uploaded
again (issue 26); implicit uploads (the transfer's ``buf``) and explicit ``jax.device_put`` calls
(a ``host_put`` marker, uploads.py).

JAX cannot keep a NumPy array on a device, so a NumPy argument is uploaded at every call.
For a loader that is unavoidable (the data is new each step); for a constant mask passed to
the jitted step it is not (``jax.device_put`` it once). The hot path tells them apart by an
identity per uploaded ndarray, stored in the transfer's ``buf`` field as a *negative* number
(device buffers are positive, 0 is unknown; both share ``Recorder.buf_ids``):

* the same identity = the same object (a weak reference to it, never its address alone: a
  freed batch's address is reused by the next one; a view of a whole array, ``mask[None]``,
  ``mask.T`` or JAX's ``TypedNdArray`` of it, is that array: ``users_array``) *and* the same
  sampled content (a hash of ~32 elements spread at no fixed stride, the first and the last,
  with shape and dtype): an array refilled in place by a loader is new data. Arrays of at most 256 bytes hash their whole content. The
  limit: a change only in unsampled elements of the same object reads as the same data;
  an array rebuilt with equal content each step reads as new data (a loader).
* cost per upload on the hot path, ``data_id`` alone, best of 5 x 20,000 on the 2-core
  reference machine (shared, load 2-8): 2.2-4.7 us for a 6 MiB float32 array (32 sampled
  reads), 0.8-1.8 us for a 4-byte 0-d array, 0.3-0.7 us for a NumPy scalar (``np.float32(1)``:
  no weak reference, so no identity, 0). An upload of 6 MiB itself takes far longer.

The second upload of one identity (never a loader's) writes one ``host_data`` marker
(``MARKER_HOST_DATA``, JSON): its id, the argument as the called function names it, the
user's variable and the line that made the array when the source says so (the last
assignment to that variable before the call, in the calling scope), shape and dtype.
"""
from __future__ import annotations

import ast
import inspect
import json
import linecache
import sys
import weakref

import numpy as np
from jax.tree_util import keystr, tree_flatten_with_path, tree_leaves

from jaxplace_cli.capture.frames import local_items
from jaxplace_cli.model.events import MARKER_HOST_DATA

_SAMPLES = 32
_GOLDEN = (5 ** 0.5 - 1) / 2
_WHOLE = 256  # bytes: hashed whole


class _Ref(weakref.ref):
    __slots__ = ("key",)


class _Table:
    """id(array) -> [weak ref, fingerprint, identity, uploads] for one recorder; an entry
    leaves with its array (the weak reference's callback)."""

    def __init__(self, rec):
        self.rec = weakref.ref(rec)
        self.entries: dict = {}

    def gone(self, ref) -> None:
        e = self.entries.get(ref.key)
        if e is not None and e[0] is ref:
            del self.entries[ref.key]


_table: _Table | None = None


def fingerprint(a: np.ndarray):
    """Shape, dtype and a hash of the content (whole up to 256 bytes, else ~32 samples spread
    over it, with the last element): no copy of the array."""
    n = a.size
    if a.nbytes <= _WHOLE:
        return (a.shape, a.dtype.str, hash(a.tobytes()))
    flat = a.flat
    return (a.shape, a.dtype.str, hash(flat[sample_positions(n)].tobytes()), hash(flat[n - 1].tobytes()))


_positions: dict[int, np.ndarray] = {}


def sample_positions(n: int) -> np.ndarray:
    """~32 positions among ``n`` elements at the fractional parts of multiples of the golden
    ratio: spread evenly yet at no fixed stride. At the stride ``n // 32`` a batch of 32 images
    was sampled at pixel 0 of every image, a zero border, so a loader refilling its buffer in
    place read as the same array again (a review, 2026-12-07)."""
    p = _positions.get(n)
    if p is None:
        if len(_positions) >= 1024:  # one entry per array size uploaded: bounded all the same
            _positions.clear()
        p = _positions[n] = np.unique((np.arange(_SAMPLES) * _GOLDEN % 1.0 * n).astype(np.intp))
    return p


def data_id(rec, a, fn=None, args=(), kwargs=None) -> int:
    """The identity (< 0) of host array ``a`` uploaded by a dispatch of ``fn(*args,
    **kwargs)``, or 0 (not an ndarray). Never raises: a failure is the recording's."""
    global _table
    if not isinstance(a, np.ndarray):
        return 0
    try:
        given, a = a, users_array(a, args, kwargs or {})  # identity: the array it is (named: as given)
        t = _table
        if t is None or t.rec() is not rec:
            t = _table = _Table(rec)
        key = id(a)
        fp = fingerprint(a)
        e = t.entries.get(key)
        if e is not None and e[0]() is a and e[1] == fp:
            e[3] += 1
            if e[3] == 2:  # the same data again: say once what it is (cold path)
                _describe(rec, a, given, e[2], fn, args, kwargs or {})
            return e[2]
        try:
            ref = _Ref(a, t.gone)
        except TypeError:  # a subclass without weak references: no identity
            return 0
        ref.key = key
        hid = -next(rec.buf_ids)
        t.entries[key] = [ref, fp, hid, 1]
        return hid
    except Exception as exc:  # recording must never break the user's call
        rec.recording_failed(exc)
        return 0


def users_array(a: np.ndarray, args, kwargs) -> np.ndarray:
    """The array whose upload ``a`` is, for its identity. A view of a whole array is that array:
    ``step(x, mask[None])`` (or ``mask.T``) makes a new view object at every call, and
    ``jnp.asarray(mask)`` hands its dispatch JAX's ``TypedNdArray`` view of ``mask``; taken as
    themselves, the same mask uploaded at every step read as a loader's new batches (an info
    where a warning was due; reviews, 2026-12-07). A slice of a dataset (``data[i:i + 32]``) is
    not the whole array: its own identity. A converted copy JAX made (float64 without x64) is the
    call's one NumPy argument of its shape (not for a 0-d value: JAX makes those from scalars)."""
    b = _viewed(a)
    if not jax_made(a):  # the user's own (a plain array, a np.memmap): no guess
        return b
    mine = [x for x in (*args, *kwargs.values()) if type(x) is np.ndarray]
    if any(_viewed(x) is b for x in mine):
        return b
    mine = [x for x in mine if x.shape == a.shape]
    return _viewed(mine[0]) if len(mine) == 1 and a.ndim else b


def jax_made(a) -> bool:
    """Is ``a`` JAX's own host array (``TypedNdArray``: what JAX makes of a host value it is
    about to upload), not the user's?"""
    return type(a).__name__ == "TypedNdArray"


def _viewed(a: np.ndarray) -> np.ndarray:
    """The array ``a`` is a whole view of (itself when it is none)."""
    while isinstance(a.base, np.ndarray) and _whole_view(a, a.base):
        a = a.base
    return a


def _whole_view(v: np.ndarray, base: np.ndarray) -> bool:
    """``v`` covers exactly the memory of ``base`` (a reshape, a transpose, an added axis)."""
    return (v.nbytes == base.nbytes and
            v.__array_interface__["data"][0] == base.__array_interface__["data"][0])


def _describe(rec, a, given, hid, fn, args, kwargs) -> None:
    """The ``host_data`` marker of identity ``hid``: array ``a``, uploaded as ``given`` (``a``
    itself, a view of it, JAX's view or copy of it), named as the call's arguments hold it."""
    user, _ = rec.user_frame_and_caller(sys._getframe(2))
    shown = _as_given(a, given, args, kwargs)  # table = np.arange(n).reshape(..): table, not the 1-D base
    var, made = "", 0
    if user is not None:
        var, scope = variable_of(user, shown)
        if not var and shown is not a:
            var, scope = variable_of(user, a)  # step(x, mask[None]): mask
        root = var
        if not var:  # a leaf of a container the caller holds: consts['bias'] of step(x, consts)
            root, scope, path = _container_of(user, shown, args, kwargs or {})
            var = root + path if root else ""
        line = made_line(user, root, scope) if root else 0
        if root and root != var and _in_the_loop(user, line):
            root, var, line = "", "", 0  # a container rebuilt at every call (a loader's dict): its leaf's path
        if line:
            made = rec._intern_site(("host data", id(user.f_code), line), _At(user.f_code, line))
    doc = {"id": hid, "arg": argument_name(fn, args, kwargs, shown), "var": var, "made": made,
           "shape": list(shown.shape), "dtype": str(shown.dtype)}
    rec.marker(MARKER_HOST_DATA, json.dumps(doc, separators=(",", ":")))


class _At:
    """A frame's code at another line: what ``Recorder._intern_site`` reads."""

    __slots__ = ("f_code", "f_lineno")

    def __init__(self, code, line):
        self.f_code, self.f_lineno = code, line


def argument_name(fn, args, kwargs, a) -> str:
    """``a`` as ``fn`` names it: ``mask``, ``batch['x']``, ``args[2]``; "" when not found or no ``fn``."""
    where = None
    for i, x in enumerate(args):
        path = _path_in(x, a)
        if path is not None:
            where = (i, path)
            break
    else:
        for k, x in kwargs.items():
            path = _path_in(x, a)
            if path is not None:
                return k + path
        return ""
    i, path = where
    try:
        params = list(inspect.signature(fn).parameters.values()) if fn is not None else []
    except (TypeError, ValueError):
        params = []
    for j, p in enumerate(params):
        if p.kind is p.VAR_POSITIONAL:
            return f"{p.name}[{i - j}]{path}"
        if j == i and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            return p.name + path
    # no function (an inner dispatch's leg: its op's own arguments): "a NumPy argument of jnp.asarray"
    # reads better than "argument `argument 0`"
    return f"argument {i}{path}" if fn is not None else ""


def _path_in(x, a):
    if x is a:
        return ""
    if isinstance(x, (list, tuple, dict)):
        for path, leaf in tree_flatten_with_path(x)[0]:
            if leaf is a:
                return keystr(path)
    return None


def _as_given(a, given, args, kwargs):
    """``given`` when it is a plain array (the user's); else the object among the call's
    arguments (leaves included) that views ``a`` whole (``jnp.asarray(mask)``: JAX's view of
    ``mask``, no argument of the call); else ``a``."""
    if type(given) is np.ndarray:
        return given
    for x in tree_leaves((args, kwargs)):
        if isinstance(x, np.ndarray) and (x is given or _viewed(x) is a):
            return x
    return a


def _in_the_loop(frame, line: int) -> bool:
    """Is ``line`` inside a loop that holds the frame's current line (the call)? Then what it
    assigns is made again at every iteration."""
    tree = _TREES.get(frame.f_code.co_filename)
    if tree is None or not line:
        return False
    here = frame.f_lineno
    return any(isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and n.lineno <= here <= (n.end_lineno or 0)
               and n.lineno <= line <= (n.end_lineno or 0) for n in ast.walk(tree))


def _container_of(frame, a, args, kwargs) -> tuple[str, str, str]:
    """(the caller's name for the argument that holds ``a``, its scope, ``a``'s path in it:
    ``['bias']``), or ("", "", "")."""
    for x in (*args, *kwargs.values()):
        path = _path_in(x, a)
        if path:
            name, scope = variable_of(frame, x)
            if name:
                return name, scope, path
    return "", "", ""


def variable_of(frame, a) -> tuple[str, str]:
    """(the name ``frame`` holds ``a`` under, "local" or "global"), or ("", "")."""
    for scope, names in (("local", local_items(frame)), ("global", frame.f_globals.items())):
        for name, v in names:
            if v is a and not name.startswith("__"):
                return name, scope
    return "", ""


_TREES: dict = {}


def made_line(frame, var: str, scope: str) -> int:
    """The line of the last assignment to ``var`` before the frame's line, in the frame's
    function (``scope`` local) or the module's top level (global); else the first after it;
    0 when the source has none (a parameter, a name from elsewhere)."""
    code = frame.f_code
    lines = linecache.getlines(code.co_filename, frame.f_globals)
    if not lines:
        return 0
    tree = _TREES.get(code.co_filename)
    if tree is None:
        try:
            tree = _TREES[code.co_filename] = ast.parse("".join(lines))
        except (SyntaxError, ValueError):
            return 0
    body = tree
    if scope == "local" and code.co_name != "<module>":
        body = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and code.co_firstlineno in {n.lineno, *(d.lineno for d in n.decorator_list)}), None)
        if body is None:
            return 0
    found = sorted(_assignments(body, var))
    before = [n for n in found if n < frame.f_lineno]
    return before[-1] if before else (found[0] if found else 0)


def _assignments(scope, var: str):
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue  # another scope
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            targets = [node.target]
        for t in targets:
            if any(isinstance(n, ast.Name) and n.id == var for n in ast.walk(t)):
                yield node.lineno
        todo.extend(ast.iter_child_nodes(node))
