"""``OpInfo``: what a policy knows about an op when it decides, and op-name aliases."""
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


def canonical(name: str) -> str:
    """``jnp.matmul``/``matmul``/``dot_general`` -> ``dot_general``; unknown names unchanged
    (a jit function's name too: ``jit(f) [model.py:12]`` holds a dot that is not a module)."""
    if name.startswith("jit("):
        return name
    base = name.rsplit(".", 1)[-1]
    return ALIASES.get(base, base)


@dataclass
class OpInfo:
    """Everything a policy may look at. Shapes/dtypes/nbytes describe the array arguments."""

    name: str  # canonical op name (aliases resolved): "dot_general", "jit(step)", ...
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

    @property
    def dtype(self):
        return self.dtypes[0] if self.dtypes else None

    @property
    def shape(self):
        return self.shapes[0] if self.shapes else None
