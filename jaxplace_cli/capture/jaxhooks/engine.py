"""The placer: asks the policy where an op goes, moves its arguments there, records it all.

Called from the dispatch hooks (``record_call``) before the op runs. It
- builds an ``OpInfo`` (names, shapes, dtypes, user site, backward flag, occurrence);
- asks the policy; ``None`` means JAX decides and nothing changes;
- moves every jax.Array argument that lives elsewhere to the chosen device, recording each
  move as an implicit d2d transfer caused by the policy (the moved copy keeps the buffer
  identity of the original, so analyses still follow the data);
- runs the op under ``jax.default_device`` so ops without array inputs are created there,
  and marks outputs with their *home* so ``rr`` can tell placed data from unplaced data.
Values never change: only where they live.
"""
from __future__ import annotations

import threading
from threading import get_ident
from time import perf_counter_ns

import jax
import numpy as np
from jax.tree_util import tree_flatten, tree_unflatten

from jaxplace_cli.capture import frames
from jaxplace_cli.capture.jaxhooks import state
from jaxplace_cli.capture.jaxhooks.state import tls
from jaxplace_cli.model.events import D2D, TransferEvent
from jaxplace_cli.placement.devices import resolve, select
from jaxplace_cli.placement.errors import PolicyError
from jaxplace_cli.placement.opinfo import OpInfo, canonical
from jaxplace_cli.placement.policies import Policy

_Array = jax.Array
try:  # the constructor that can make an uncommitted array (see _uncommitted)
    from jax._src.array import ArrayImpl as _ArrayImpl
except ImportError:
    _ArrayImpl = None
HOME = "_jaxplace_home"
FALLBACK = "fallback"
RAISE = "raise"


def _original_device_put():
    fn = jax.device_put
    return getattr(fn, "__jaxplace_original__", fn)


class Placer:
    def __init__(self, policy: Policy, device_names: list[str] | None = None,
                 on_error: str = RAISE, granularity: str = "unit"):
        self.policy = policy
        self.device_names = device_names
        self.on_error = on_error
        self.granularity = granularity
        self._allowed = None
        self._occurrence: dict = {}
        self._lock = threading.Lock()
        self._device_put = _original_device_put()
        self.decisions = 0
        self.fallbacks = 0
        self.plans: dict = {}  # --granularity op: segment plans per call signature

    @property
    def allowed(self) -> list:
        if self._allowed is None:
            try:
                self._allowed = select(self.device_names)
            except LookupError as exc:
                raise PolicyError(f"--devices: {exc}") from None
        return self._allowed

    # -- decision ----------------------------------------------------------------------------
    def op_info(self, rec, name, kind, leaves, args, site, backward, kwargs=None) -> OpInfo:
        shapes, dtypes, inputs, nbytes = [], [], [], 0
        for a in leaves:
            # a class is no operand: np.float32 passed as a dtype has `shape` and `dtype` too
            # (descriptors of its class), and tuple() of one raised in every jnp.zeros(n, np.float32)
            if isinstance(a, type):
                continue
            if isinstance(a, _Array) or hasattr(a, "shape") and hasattr(a, "dtype"):
                try:
                    shape = tuple(getattr(a, "shape", ()))
                    size = int(getattr(a, "nbytes", 0) if not isinstance(a, _Array) else _nbytes(a))
                except (TypeError, ValueError, AttributeError):  # an array-like with odd attributes
                    continue
                shapes.append(shape)
                dtypes.append(getattr(a, "dtype", None))
                nbytes = max(nbytes, size)
                if isinstance(a, _Array):
                    dev = _device_of(a)
                    placed = bool(getattr(a, "_committed", False)) or getattr(a, HOME, None) is not None
                    inputs.append((dev, placed, int(size)))
        s = rec.site_info.get(site) if rec is not None else None
        key = (site, name)
        with self._lock:
            occ = self._occurrence.get(key, 0)
            self._occurrence[key] = occ + 1
        extra = {"inputs": inputs}
        if kwargs and kwargs.get("dtype") is not None:  # jnp.sum(x, dtype=...): what it computes in
            try:
                extra["dtype"] = np.dtype(kwargs["dtype"])
            except TypeError:
                pass
        return OpInfo(canonical(name), kind, tuple(args), shapes, dtypes, nbytes,
                      s.file if s else "", s.line if s else 0, s.function if s else "",
                      backward, occ, self.allowed, raw_name=name, extra=extra)

    def decide(self, info: OpInfo, rec=None):
        """The device for ``info`` (None = JAX decides), applying --on-policy-error."""
        try:
            target = self.policy.decide(info)
            if target is None:
                return None, info.extra.get("rule", "")
            device = resolve(target, info.devices)
        except Exception as exc:  # the user's policy: anything can happen
            where = f"{info.file}:{info.line}" if info.file else "an unknown site"
            shapes = ", ".join(f"{d}{list(s)}" for s, d in zip(info.shapes, info.dtypes)) or "no array arguments"
            msg = (f"policy {self.policy.label} failed for op {info.raw_name or info.name} ({shapes}) "
                   f"at {where}: {type(exc).__name__}: {exc}")
            if self.on_error == FALLBACK:
                self.fallbacks += 1
                if rec is not None:
                    rec.marker("policy-fallback", msg)
                return None, FALLBACK
            raise PolicyError(msg + "; fix the policy or pass --on-policy-error fallback to let JAX decide") from None
        note = info.extra.get("note")
        if note and rec is not None:
            rec.marker("policy-note", note)
        self.decisions += 1
        label = self.policy.label
        rule = info.extra.get("rule")
        return device, f"{label} {rule}" if rule else label

    # -- the hook entry point -----------------------------------------------------------------
    def place(self, rec, spec, fn, args, kwargs, site, seq, backward):
        if spec.flatten:
            dynamic = _dynamic(spec, args, kwargs)
        else:
            dynamic = [a for a in (*args, *kwargs.values())]
        leaves, _ = tree_flatten(dynamic)
        if any(isinstance(a, _Array) and getattr(a.sharding, "_device", None) is None
               and len(a.sharding.device_set) > 1 for a in leaves):
            # Sharded over several devices (NamedSharding, pmap/shard_map results): moving it
            # onto one device would change the computation itself (other reduction order,
            # no collectives), not only where it runs. JAX decides.
            return fn, args, kwargs, ""
        if any(type(a).__name__ == "Ref" for a in leaves):
            # A mutable reference (jax.new_ref) stays where it was made and is updated there: the
            # call runs on its device, as JAX decides. Moving the other operands only made copies
            # JAX moved back, or hid its "incompatible devices" error from a program that fails
            # under python; per op, the segments' replay cannot update it ("Out of bound indexer").
            return fn, args, kwargs, ""
        committed = {_device_of(a) for a in leaves if isinstance(a, _Array)
                     and getattr(a, "_committed", False) and getattr(a, HOME, None) is None}
        if len(committed) > 1:
            # The user committed the operands to different devices: JAX raises "Received
            # incompatible devices" for this call under python, and so it must here (a policy
            # changes where work runs, never whether a program fails); the recorded failure
            # is what the incompatible-devices finding explains. Data a policy placed (it has
            # a home) is moved as usual.
            return fn, args, kwargs, ""
        if self.granularity == "op" and spec.kind == "jit":
            from jaxplace_cli.capture.jaxhooks.partition import run_partitioned

            def partitioned(*a, **k):
                return run_partitioned(self, rec, spec, fn, a, k, site, seq)

            partitioned.moves_its_operands = True  # its uploads and moves are recorded inside it
            return partitioned, args, kwargs, f"{self.policy.label} (per op)"
        info = self.op_info(rec, spec.name, spec.kind, leaves, args, site, backward, kwargs)
        device, label = self.decide(info, rec)
        if device is None:
            home = _placed_home(leaves)
            return (fn if home is None else _on_device(fn, home)), args, kwargs, label if label == FALLBACK else ""
        moved: list = []
        args, kwargs = self.move_tree((args, kwargs), device, rec, spec.name, site, seq, label, moved)
        return _on_device(fn, device, uncommit=any(moved)), args, kwargs, label

    def move_tree(self, tree, device, rec, name, site, seq, label, moved=None):
        """``tree`` with every array moved to ``device``; ``moved`` (a list) gets one flag per
        move: whether the array was committed (JAX would have run the op where it was)."""
        leaves, treedef = tree_flatten(tree)
        changed = False
        for i, a in enumerate(leaves):
            if isinstance(a, _Array) and _device_of(a) != device:
                if moved is not None:
                    moved.append(bool(getattr(a, "_committed", True)))
                leaves[i] = self.move(a, device, rec, name, site, seq, label)
                changed = True
        return tree_unflatten(treedef, leaves) if changed else tree

    def move(self, a, device, rec, name, site, seq, label):
        src = _device_of(a)
        depth, tls.depth = tls.depth, 1  # recorded below, as the policy's move
        try:
            # the policy's move, not the script's: under the script's
            # jax.transfer_guard("disallow_explicit") it failed a correct program
            with jax.transfer_guard_device_to_device("allow"):
                moved = self._device_put(a, device)
        finally:
            tls.depth = depth
        if not getattr(a, "_committed", True):
            moved = _uncommitted(moved)
        if rec is not None:
            from jaxplace_cli.capture.jaxhooks.state import label as dev_label

            buf = getattr(a, "_jaxplace_buf", 0)
            if buf:
                try:
                    moved._jaxplace_buf = buf  # same value, same identity: lineage continues
                except AttributeError:
                    pass
            rec.add_transfer(TransferEvent(rec.next_seq(), perf_counter_ns() - rec.t0, get_ident(), D2D,
                                           dev_label(src) if src is not None else "?", dev_label(device),
                                           _nbytes(a), True, False, f"{name} (moved by policy {label})",
                                           site, buf, seq))
        return moved


def _placed_home(leaves):
    """Where "JAX decides" must run an op whose inputs a policy placed: the one device its
    placed (uncommitted, see ``_uncommitted``) inputs live on — as JAX would for committed
    data — or None when JAX's own rule already applies (committed inputs, unplaced data, or
    placed data on several devices)."""
    home = None
    for a in leaves:
        if isinstance(a, _Array):
            if getattr(a, "_committed", False):
                return None
            h = getattr(a, HOME, None)
            if h is not None:
                if home is not None and h != home:
                    return None
                home = h
    return home


def _uncommitted(a):
    """``a`` (one device) as an uncommitted array: what JAX would have made had the data been
    created on that device. ``device_put`` commits, and a committed single-device array is
    refused by ``pmap`` and by ``shard_map``/``jit`` over several devices, so a policy that
    moved data the user never committed would break programs that were legal. The op then
    runs under ``jax.default_device`` of the same device (``_on_device``), so JAX keeps it
    there. Falls back to the committed copy where this JAX has no such constructor."""
    if _ArrayImpl is None:
        return a
    try:
        base = getattr(a, "_base_array", None)
        if base is not None and hasattr(a, "_impl"):  # a PRNG key array: its data, uncommitted
            from jax._src.random.prng import PRNGKeyArray

            return PRNGKeyArray(a._impl, _uncommitted(base))
        return _ArrayImpl(a.aval, a.sharding, [s.data for s in a.addressable_shards], committed=False)
    except Exception:  # another JAX version: committed is still correct, only stricter
        return a


def _dynamic(spec, args, kwargs):
    if spec.static_argnums or spec.static_argnames:
        args = [a for i, a in enumerate(args) if i not in spec.static_argnums]
        kwargs = {k: v for k, v in kwargs.items() if k not in spec.static_argnames}
    return [args, kwargs]


def _device_of(a):
    dev = getattr(a.sharding, "_device", None)
    if dev is None:
        devs = a.sharding.device_set
        dev = next(iter(devs)) if len(devs) == 1 else None
    return dev


def _nbytes(a) -> int:
    aval = a.aval
    n = aval.dtype.itemsize
    for d in aval.shape:
        n *= d
    return n


def _on_device(fn, device, uncommit: bool = False):
    """Run ``fn`` with ``device`` as the default (creation ops land there) and mark homes.

    ``uncommit``: the policy moved committed data, so JAX would have run the op (and kept its
    results) where that data was. Its results come back uncommitted: committed to the
    policy's device they would meet the user's other committed arrays in code jaxplace does
    not place (a library's own jitted functions, ``jax.scipy.linalg.solve_triangular``) and
    fail there with "Received incompatible devices" — a correct program made to fail.
    Uncommitted, JAX copies them to their partner's device instead (as with any uncommitted
    array; that copy is the cost a policy's d2d shows)."""

    def run(*args, **kwargs):
        with jax.default_device(device):
            out = fn(*args, **kwargs)
        leaves, treedef = tree_flatten(out)
        changed = False
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, _Array):
                if uncommit and getattr(leaf, "_committed", False):
                    buf = leaf.__dict__.get("_jaxplace_buf") if hasattr(leaf, "__dict__") else None
                    old, leaf = leaf, _uncommitted(leaf)
                    leaves[i] = leaf
                    changed = True
                    if buf:
                        leaf._jaxplace_buf = buf
                        if state.active.rec is not None:  # the new Array holds the buffer now
                            state.active.rec.memory.retarget(old, leaf)
                try:
                    setattr(leaf, HOME, device)
                except AttributeError:
                    pass
        return tree_unflatten(treedef, leaves) if changed else out

    run.__code__ = frames.shimmed(run.__code__)  # warnings skip it: they name the user's line
    run.__wrapped__ = fn  # what it runs: a jit's dropped arguments are read from it (legs.py)
    run.default_device = device  # and where it runs, when no result says (inputs.py)
    return run
