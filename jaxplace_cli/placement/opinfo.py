"""``OpInfo``: what a policy knows about an op when it decides, and op-name aliases.

A policy written the way people talk about ops must work as written (issue 14):
``op == 'matmul'`` and ``op == 'dot_general'`` both match ``a @ b``; ``op == 'transpose'``
matches ``x.T``; ``op in ['conv', 'matmul']`` and ``op in ['sort', 'scan']`` match the op
families those words name. The op name a Python policy receives is therefore an ``OpName``:
a ``str`` holding the primitive name (``"dot_general"``; what rules files and older
policies compare with), whose ``==`` also accepts every other spelling of the op and of its
family, and which has ``.name`` (the name as dispatched: ``"matmul"`` for ``a @ b``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# What users call an op -> the primitive name it dispatches (rules match either).
ALIASES = {
    "matmul": "dot_general", "dot": "dot_general", "tensordot": "dot_general",
    "einsum": "dot_general", "inner": "dot_general", "vdot": "dot_general",
    "conv": "conv_general_dilated", "convolve": "conv_general_dilated",
    "conv_general_dilated": "conv_general_dilated",
    "sum": "reduce_sum", "max": "reduce_max", "amax": "reduce_max", "min": "reduce_min",
    "amin": "reduce_min", "prod": "reduce_prod", "multiply": "mul", "subtract": "sub",
    "true_divide": "div", "divide": "div", "negative": "neg", "power": "pow",
    "transpose": "transpose", "sort": "sort", "argsort": "sort", "cumsum": "cumsum",
    "getitem": "gather", "scan": "scan", "while_loop": "while", "fori_loop": "while",
    "cond": "cond",
}
# More spellings of the same primitives (jax.numpy / lax names), for OpName equality only:
# rules files keep ALIASES as documented (docs/policies.md).
_SPELLINGS = {
    "correlate": "conv_general_dilated", "conv_transpose": "conv_general_dilated",
    "conv_with_general_padding": "conv_general_dilated",
    "swapaxes": "transpose", "moveaxis": "transpose", "permute_dims": "transpose",
    "matrix_transpose": "transpose", "T": "transpose", "mT": "transpose",
    "lexsort": "sort", "sort_complex": "sort", "msort": "sort",
    "matvec": "dot_general", "vecmat": "dot_general", "vecdot": "dot_general",
    "add_any": "add", "associative_scan": "scan",
}
# A word -> the primitives it names besides its own: a "scan" is any prefix scan, an "add"
# includes the accumulation of a sum (the article's mixed-precision policy sends
# ``jnp.sum(b, dtype=float32)`` to the CPU by ``op == 'add' and dtype == float32``).
FAMILIES = {
    "scan": frozenset({"cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"}),
    "add": frozenset({"reduce_sum"}),
    "mul": frozenset({"reduce_prod"}),
}


def canonical(name: str) -> str:
    """``jnp.matmul``/``matmul``/``dot_general`` -> ``dot_general``; unknown names unchanged
    (a jit function's name too: ``jit(f) [model.py:12]`` holds a dot that is not a module)."""
    if name.startswith("jit("):
        return name
    base = name.rsplit(".", 1)[-1]
    return ALIASES.get(base, base)


def _primitive(word: str) -> str:
    base = word.rsplit(".", 1)[-1]
    return ALIASES.get(base) or _SPELLINGS.get(base) or base


class OpName(str):
    """The name of the op a policy is asked about (see the module docstring). ``str(op)`` is
    the primitive name; ``op == word`` is true when ``word`` names this op or its family;
    ``op.name`` is the name as dispatched. Hashes as the primitive name, so in a set or dict
    key write the primitive name (``{"dot_general"}``); ``==`` and ``in [...]`` take any."""

    def __new__(cls, primitive: str, dispatched: str = ""):
        obj = super().__new__(cls, primitive)
        obj._dispatched = dispatched or primitive
        base = obj._dispatched.rsplit(".", 1)[-1]
        obj._spellings = {primitive, obj._dispatched, base, _primitive(base)}
        return obj

    def __eq__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        if other in self._spellings:
            return True
        word = _primitive(other)
        return word in self._spellings or bool(self._spellings & FAMILIES.get(word, frozenset()))

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = str.__hash__

    def __reduce__(self):  # pickles (and copies) as what it is made of
        return (OpName, (str(self), self._dispatched))

    @property
    def name(self) -> str:
        """The op's name as dispatched: ``matmul`` for ``a @ b``, ``jit(step)`` for a jit call."""
        return self._dispatched

    @property
    def primitive(self) -> str:
        return str(self)


@dataclass
class OpInfo:
    """Everything a policy may look at. Shapes/dtypes/nbytes describe the array arguments."""

    name: str  # canonical op name (aliases resolved): "dot_general", "jit(step)", ... (an OpName)
    kind: str  # jit | jnp | method | prim | eqn (a primitive inside a jitted function)
    args: tuple = ()
    shapes: list = field(default_factory=list)
    dtypes: list = field(default_factory=list)
    nbytes: int = 0  # largest array argument
    file: str = ""
    line: int = 0
    function: str = ""
    backward: bool = False
    occurrence: int = 0  # n-th call of this op name at this site (0-based)
    devices: list = field(default_factory=list)  # devices the policy may use
    raw_name: str = ""  # the name as dispatched (before aliasing)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, OpName):
            self.name = OpName(str(self.name), self.raw_name)

    @property
    def dtype(self):
        """The dtype the op computes in: its ``dtype=`` argument when it has one
        (``jnp.sum(b, dtype=jnp.float32)`` on float16 data is a float32 sum), else its first
        array argument's."""
        requested = self.extra.get("dtype")
        if requested is not None:
            return requested
        return self.dtypes[0] if self.dtypes else None

    @property
    def shape(self):
        return self.shapes[0] if self.shapes else None
