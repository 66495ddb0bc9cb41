"""Issue 24 item 4: a leg caused by a function of ``jax.numpy``, ``jax.random``, ``jax.nn`` or
``jax.scipy`` is labelled with the public call the user wrote (``jnp.zeros``, ``jnp.linalg.norm``,
``jax.random.key``), while the op keeps its short name (``zeros``, ``random.key``): policies and
rules files match on that. Recorded in process on real JAX, the second call of each (compiled,
JAX's conversions cached, as in a loop); the labels, leg counts and bytes are written by hand and
the counts agree with JAX's transfer guard (``log_explicit``) on the same calls: a Python scalar
is one 4 B leg with x64 off, a float32 NumPy argument its size.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from inprocess import recorded

X = jnp.ones((4,))
A = np.ones((4, 4), np.float32)

# case -> (its h2d legs by hand: [(label, bytes)], the op name recorded)
CASES = {
    "jnp.zeros(3)": (lambda: jnp.zeros(3), [("jnp.zeros (Python scalar)", 4)], "zeros"),
    "jnp.dot(np, x)": (lambda: jnp.dot(A, X), [("jnp.dot (numpy argument)", 64)], "dot"),
    "jnp.asarray(np)": (lambda: jnp.asarray(A), [("jnp.asarray (host data)", 64)], "asarray"),
    "jnp.add(x, 1.0)": (lambda: jnp.add(X, 1.0), [("jnp.add (Python scalar)", 4)], "add"),
    "jnp.clip(x, 0.0, 1.0)": (lambda: jnp.clip(X, 0.0, 1.0), [("jnp.clip (Python scalar)", 4)] * 2, "clip"),
    "jnp.linalg.norm(np)": (lambda: jnp.linalg.norm(A), [("jnp.linalg.norm (numpy argument)", 64)],
                            "linalg.norm"),
    "jnp.fft.fft(np)": (lambda: jnp.fft.fft(A), [("jnp.fft.fft (numpy argument)", 64)], "fft.fft"),
    "jax.nn.sigmoid(np)": (lambda: jax.nn.sigmoid(A), [("jax.nn.sigmoid (numpy argument)", 64)], "nn.sigmoid"),
    "jax.scipy.special.erf(np)": (lambda: jax.scipy.special.erf(A),
                                  [("jax.scipy.special.erf (numpy argument)", 64)], "scipy.special.erf"),
    "jax.random.key(0)": (lambda: jax.random.key(0), [("jax.random.key (Python scalar)", 4)], "random.key"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_function_legs_are_labelled_with_the_public_call(case):
    f, legs, op = CASES[case]
    with recorded():
        jax.block_until_ready(f())
    with recorded() as r:
        jax.block_until_ready(f())
    assert [(t.api, t.bytes) for t in r.of("h2d")] == legs
    assert [o.name for o in r.ops] == [op]


def test_an_uncommitted_operand_of_a_jnp_function():
    """``jnp.add`` of an uncommitted array on cpu:0 and one committed to cpu:1: JAX copies the
    16 B over, a leg labelled with the call, as ``x + y`` labels the operator's."""
    committed = jax.device_put(jnp.ones(4), jax.devices()[1])
    loose = jnp.ones(4)
    with recorded():
        jax.block_until_ready(jnp.add(committed, loose))
    with recorded() as r:
        jax.block_until_ready(jnp.add(committed, loose))
    assert [(t.kind, t.api, t.src, t.dst, t.bytes) for t in r.transfers] == [
        ("d2d", "jnp.add (uncommitted input)", "cpu:0", "cpu:1", 16)]
    assert [o.name for o in r.ops] == ["add"]


def test_lineage_names_ops_by_their_public_call():
    """The audit's lineage says how the user wrote an op, with the prefixes the legs' labels use."""
    from jaxplace_cli.analysis.lineage import op_label
    from jaxplace_cli.model.events import OP_JNP

    assert [op_label(OP_JNP, n) for n in ("ones", "random.normal", "nn.relu", "scipy.linalg.solve")] == \
        ["jnp.ones", "jax.random.normal", "jax.nn.relu", "jax.scipy.linalg.solve"]
    assert op_label("method", "multiply") == "multiply"
