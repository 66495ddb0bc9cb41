"""Issue 24 item 4: a transfer's label says the call as the user wrote it — ``x + y``, ``x[i]``,
``x @ y`` for Array operators, the public read API for a host read — never the name of a
function inside JAX, NumPy, the standard library or a library. Each case is recorded in
process on real JAX; the expected labels, counts and bytes are written by hand (a Python
scalar is a 4 B leg with x64 off; a float32 array its size). The op itself keeps its
jax.numpy name (``add``, ``getitem``): policies and rules files match on that.
"""
import statistics

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from inprocess import recorded

X = jnp.ones((4,))
XI = jnp.ones((4,), jnp.int32)
A = np.ones((4, 4), np.float32)

# case -> (its h2d legs by hand: [(label, bytes)], the op name recorded)
CASES = {
    "x + 1.0": (lambda: X + 1.0, [("x + y (Python scalar)", 4)], "add"),
    "1.0 - x": (lambda: 1.0 - X, [("x - y (Python scalar)", 4)], "subtract"),
    "x * np.float32(2)": (lambda: X * np.float32(2), [("x * y (numpy argument)", 4)], "multiply"),
    "x / 2.0": (lambda: X / 2.0, [("x / y (Python scalar)", 4)], "true_divide"),
    "x // 2.0": (lambda: X // 2.0, [("x // y (Python scalar)", 4)], "floor_divide"),
    "x % 2.0": (lambda: X % 2.0, [("x % y (Python scalar)", 4)], "remainder"),
    "x == 1.0": (lambda: X == 1.0, [("x == y (Python scalar)", 4)], "equal"),
    "x >= 1.0": (lambda: X >= 1.0, [("x >= y (Python scalar)", 4)], "greater_equal"),
    "xi & 1": (lambda: XI & 1, [("x & y (Python scalar)", 4)], "bitwise_and"),
    "3 ^ xi": (lambda: 3 ^ XI, [("x ^ y (Python scalar)", 4)], "bitwise_xor"),
    "xi << 1": (lambda: XI << 1, [("x << y (Python scalar)", 4)], "left_shift"),
    "x ** 2.5": (lambda: X ** 2.5, [("x ** y (Python scalar)", 4)], "power"),
    "x ** 2": (lambda: X ** 2, [], "power"),  # integer_pow: the 2 is a parameter
    "2.0 ** x": (lambda: 2.0 ** X, [("x ** y (Python scalar)", 4)], "power"),
    "x + np_array": (lambda: X + np.ones(4, np.float32), [("x + y (numpy argument)", 16)], "add"),
    "x @ np_array": (lambda: X @ A, [("x @ y (numpy argument)", 64)], "matmul"),
    "x[1]": (lambda: X[1], [("x[i] (Python scalar)", 4)], "getitem"),
    "-x": (lambda: -X, [], "negative"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_operator_legs_are_labelled_as_written(case):
    f, legs, op = CASES[case]
    with recorded():
        jax.block_until_ready(f())  # compiled, and JAX's conversions cached, as in a loop
    with recorded() as r:
        jax.block_until_ready(f())
    assert [(t.api, t.bytes) for t in r.of("h2d")] == legs
    assert [o.name for o in r.ops] == [op]


def test_an_uncommitted_operand_copied_by_an_operator():
    """An uncommitted array on cpu:0 added to one committed to cpu:1: JAX copies it over (16 B)."""
    committed = jax.device_put(jnp.ones(4), jax.devices()[1])
    loose = jnp.ones(4)
    with recorded():
        jax.block_until_ready(committed + loose)
    with recorded() as r:
        jax.block_until_ready(committed + loose)
    assert [(t.kind, t.api, t.src, t.dst, t.bytes) for t in r.transfers] == [
        ("d2d", "x + y (uncommitted input)", "cpu:0", "cpu:1", 16)]


def test_a_read_inside_the_standard_library_names_the_read():
    """``statistics.fmean`` turns each value into a float inside the standard library: two 4 B
    reads named ``float()``, not ``fmean`` (the stdlib function the read passed through)."""
    xs = jax.block_until_ready([jnp.float32(1.0), jnp.float32(2.0)])
    with recorded() as r:
        assert statistics.fmean(xs) == 1.5
    assert [(t.api, t.bytes) for t in r.of("d2h")] == [("float()", 4), ("float()", 4)]


def test_a_call_into_jax_is_named_by_its_outermost_public_function():
    """What names a leg or read no wrapper saw (``common.called_api``), on real JAX frames: from
    inside a function JAX calls back, the outermost JAX function between it and this test,
    with its public prefix; ``jax.vmap`` and ``jax.grad``, not the ``api_boundary`` wrapper
    around them (whose wrapped function carries the user's name); a jitted function's slow path
    as ``jit(f)``."""
    import sys

    from jaxplace_cli.capture.jaxhooks.common import called_api

    here = sys._getframe()
    seen = []

    def leaf(x):
        seen.append(called_api(sys._getframe(), here))
        return x

    jax.tree.map(leaf, [1])
    jax.tree_util.tree_map(leaf, [1])
    jax.vmap(leaf)(jnp.ones(2))
    jax.grad(leaf)(1.0)
    jax.jit(leaf)(1.0)
    assert seen == ["jax.tree.map", "jax.tree_util.tree_map", "jax.vmap", "jax.grad", "jit(leaf)"]
