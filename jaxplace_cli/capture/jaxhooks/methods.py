"""The hooks on methods of JAX's array types: ``jax.Array``'s operators and methods (``x + 1.0``,
``x.sum()``) and a typed key array's ``keys[i]``.
Installed by ``jaxhooks.install`` (``_install_array_methods``)."""
from __future__ import annotations

import inspect

from jax._src.array import ArrayImpl

from jaxplace_cli.capture.jaxhooks.common import OPERATOR_LABELS, OPERATORS_ONE_DISPATCH
from jaxplace_cli.capture.jaxhooks.dispatch import CallSpec, wrap
from jaxplace_cli.model.events import OP_METHOD

# Array operator -> the jax.numpy name users and policies know it by.
OPERATOR_NAMES = {
    "add": "add", "radd": "add", "sub": "subtract", "rsub": "subtract", "mul": "multiply",
    "rmul": "multiply", "truediv": "true_divide", "rtruediv": "true_divide",
    "floordiv": "floor_divide", "rfloordiv": "floor_divide", "mod": "remainder",
    "rmod": "remainder", "divmod": "divmod", "rdivmod": "divmod", "pow": "power",
    "rpow": "power", "matmul": "matmul", "rmatmul": "matmul", "and": "bitwise_and",
    "rand": "bitwise_and", "or": "bitwise_or", "ror": "bitwise_or", "xor": "bitwise_xor",
    "rxor": "bitwise_xor", "lshift": "left_shift", "rlshift": "left_shift",
    "rshift": "right_shift", "rrshift": "right_shift", "neg": "negative", "pos": "positive",
    "abs": "abs", "invert": "invert", "eq": "equal", "ne": "not_equal", "lt": "less",
    "le": "less_equal", "gt": "greater", "ge": "greater_equal", "getitem": "getitem",
    "round": "round",
}
NOT_METHODS = frozenset({
    "addressable_data", "copy_to_host_async", "devices", "item", "tobytes", "tolist",
    "to_device", "view", "block_until_ready", "delete", "is_deleted", "on_device_size_in_bytes",
    "unsafe_buffer_pointer", "addressable_shards", "global_shards", "is_fully_addressable",
    "is_fully_replicated",
})


def install(patch, report) -> None:
    """Array operators and methods and a typed key array's indexing: each a wrapper (``dispatch.wrap``), patched through ``patch`` (``jaxhooks._patch``, which
    remembers the original for ``uninstall``)."""
    n = 0
    for attr, obj in list(ArrayImpl.__dict__.items()):
        # the unary operators (-x, +x, abs(x), ~x) are jit functions in the class, not
        # Python functions: unwrapped, -x ran unseen, and on data a policy placed it ran on
        # JAX's default device with an unrecorded copy (found by suggest --verify, issue 19)
        jitted = type(obj).__name__ == "PjitFunction" and attr.startswith("__")
        if not (inspect.isfunction(obj) or jitted):
            continue
        if attr.startswith("__") and attr.endswith("__"):
            base = attr[2:-2]
            if base not in OPERATOR_NAMES:
                continue
            # x[0] uploads its index: dispatch.index_uploads says how much. An operator that is
            # one dispatch of its operands (x * 2.0) counts their legs itself; the others (x ** 2:
            # integer_pow, none) leave them to what they dispatch (legs.py). Labels: common.py
            spec = CallSpec(OPERATOR_NAMES[base], OP_METHOD, api=OPERATOR_LABELS[base],
                            scalar_operands=jitted or base in OPERATORS_ONE_DISPATCH)
            spec.index = base == "getitem"
            spec.depth = 2 if base in OPERATORS_ONE_DISPATCH else 1
            if spec.depth == 2:  # an operand with __jax_array__: JAX converts it (state.foreign_operand)
                spec.foreign = spec.plain_twin()
        elif attr.startswith("_") or attr in NOT_METHODS:
            continue
        else:
            spec = CallSpec(attr, OP_METHOD, scalar_operands=False)
        patch(ArrayImpl, attr, wrap(obj, spec, method=True))
        n += 1
    report.installed.append(f"Array operators and methods ({n})")
    # x.at[i].set(v) stays its primitives (stage, convert_element_type, scatter), each an op:
    # one wrapper around it would make them inner dispatches, whose device-to-device moves
    # (its index and value put on x's device) no hook counts (tried 2026-12-06: 2 legs of 2 lost)
    # a typed key array (jax.random.key) is its own class: keys[1] uploads its start index as
    # x[1] does (dispatch.index_uploads), and went unseen (its slice ran as a bare primitive)
    try:
        from jax._src.random.prng import PRNGKeyArray
    except ImportError:
        return
    getitem = PRNGKeyArray.__dict__.get("__getitem__")
    if inspect.isfunction(getitem):
        spec = CallSpec("getitem", OP_METHOD, api=OPERATOR_LABELS["getitem"])
        spec.index = True
        patch(PRNGKeyArray, "__getitem__", wrap(getitem, spec, method=True))
        report.installed.append("key array indexing")
