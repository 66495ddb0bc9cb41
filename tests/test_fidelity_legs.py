"""Issue 24: every upload path of docs/fidelity.md's table, recorded in process and counted
against JAX's own transfer guard on the same call (``jax.transfer_guard("log_explicit")``, one
stderr line per leg): the recorded h2d and d2d legs are exactly the guard's, on one device and
on data over the 4 simulated devices of conftest. The guard is the oracle; each case is warmed
up first, so both counts are of the steady state (JAX's fast path)."""
import json
import sqlite3

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import child_env, jaxplace, python
from flax import nnx
from inprocess import recorded
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

N = 4


class Lazy:
    """Converted by JAX through ``__jax_array__`` (the operator calls it, then dispatches what it
    returned): NumPy data, or a device array it makes itself (``jnp.asarray`` inside)."""

    def __init__(self, value):
        self.value = value

    def __jax_array__(self):
        return self.value() if callable(self.value) else self.value


def _cases():
    mesh = jax.make_mesh((N,), ("d",))
    x = jnp.ones((4,))
    x2 = jnp.ones((4, 5))
    i = jnp.int32(1)
    z = jax.device_put(jnp.ones(16), NamedSharding(mesh, P("d")))
    return {
        "ones": lambda: jnp.ones(3), "zeros_like": lambda: jnp.zeros_like(x), "eye": lambda: jnp.eye(3),
        "full": lambda: jnp.full(3, 2.0), "arange": lambda: jnp.arange(5.0),
        "pow_int": lambda: x ** 2, "pow_float": lambda: x ** 2.5, "mul": lambda: x * 2.0,
        "rsub": lambda: 1.0 - x, "eq": lambda: x == 1.0, "add_np": lambda: x + np.ones(4, np.float32),
        "clip": lambda: jnp.clip(x, 0.0, 1.0), "where": lambda: jnp.where(x > 0, x, 0.0),
        "at_set": lambda: x.at[0].set(1.0), "np_index": lambda: x[np.array([0, 1])],
        "jnp_index": lambda: x[jnp.array([0, 1])], "int_index": lambda: x[1], "row": lambda: x2[0],
        "jnp_scalar_index": lambda: x2[i], "mask": lambda: x[x > 0.5],
        "linspace": lambda: jnp.linspace(0, 1, 5), "array": lambda: jnp.array([1.0, 2.0]),
        "asarray": lambda: jnp.asarray(np.ones(3)), "mean": lambda: jnp.mean(x),
        "softmax": lambda: jax.nn.softmax(x), "key": lambda: jax.random.key(0),
        "lax_add": lambda: jax.lax.add(x, 1.0), "grad": lambda: jax.grad(lambda a: (a ** 2).sum())(x),
        "device_put": lambda: jax.device_put(np.ones(3)),
        "sharded_np": lambda: z + np.ones(16, np.float32), "sharded_scalar": lambda: z * 2.0,
        "replicate": lambda: jax.device_put(x, NamedSharding(mesh, P())),
        "shard": lambda: jax.device_put(jnp.ones(16), NamedSharding(mesh, P("d"))),
        "to_device_1": lambda: jax.device_put(x, jax.devices()[1]),
        "sharded_plus_one_device": lambda: z + jnp.ones(16),  # the ones put on all 4 devices
        # custom_jvp of a jitted function: it calls the jitted one with its arguments (1 leg each)
        "relu_np": lambda: jax.nn.relu(np.ones((4, 4), np.float32)), "relu_scalar": lambda: jax.nn.relu(2.0),
        "relu6_np": lambda: jax.nn.relu6(np.ones(3, np.float32)),
        # jnp.interp jits its body afresh at each call (modules.JITS_ITS_BODY): its NumPy data
        # and Python scalars are that jit's uploads; None and str arguments are static
        "interp_np": lambda: jnp.interp(np.ones(4, np.float32), x, x),
        "interp_scalars": lambda: jnp.interp(2.0, x, x, left=0.0, right="extrapolate"),
        # an operand JAX converts by its __jax_array__: the operator's own legs were 0 of 1
        "jax_array_np": lambda: x * Lazy(np.arange(4, dtype=np.float32)),
        "jax_array_asarray": lambda: x + Lazy(lambda: jnp.asarray(np.ones(4, np.float32))),
        "jax_array_device": lambda: x - Lazy(x), "jax_array_both": lambda: Lazy(np.ones(4, np.float32)) + x,
        "nnx_param_np": lambda: x + nnx.Param(np.ones(4, np.float32)), "nnx_param_device": lambda: x * nnx.Param(x),
    }


NAMES = [
    "ones", "zeros_like", "eye", "full", "arange", "pow_int", "pow_float", "mul", "rsub", "eq",
    "add_np", "clip", "where", "at_set", "np_index", "jnp_index", "int_index", "row",
    "jnp_scalar_index", "mask", "linspace", "array", "asarray", "mean", "softmax", "key",
    "lax_add", "grad", "device_put", "sharded_np", "sharded_scalar", "replicate", "shard",
    "to_device_1", "sharded_plus_one_device", "relu_np", "relu_scalar", "relu6_np", "interp_np",
    "interp_scalars", "jax_array_np", "jax_array_asarray", "jax_array_device", "jax_array_both", "nnx_param_np",
    "nnx_param_device"]


@pytest.fixture(scope="module")
def cases():
    with recorded():  # the hooks in place while the cases are made (as under jaxplace run)
        made = _cases()
    return made


@pytest.mark.parametrize("name", NAMES)
def test_recorded_legs_are_the_guards(cases, name, capfd):
    f = cases[name]
    with recorded():
        jax.block_until_ready(f())  # warm: compiled and cached, inside the hooks
    jax.block_until_ready(f())
    capfd.readouterr()
    with jax.transfer_guard("log_explicit"):
        jax.block_until_ready(f())
    err = capfd.readouterr().err
    guard = (err.count("host-to-device transfer"), err.count("device-to-device transfer"))
    with recorded() as r:
        jax.block_until_ready(f())
    assert (len(r.of("h2d")), len(r.of("d2d"))) == guard, [(t.kind, t.api, t.dst, t.bytes) for t in r.transfers]


def test_integer_power_uploads_nothing(cases):
    """x ** 2 is integer_pow (the 2 is a parameter): no phantom 4 B upload."""
    with recorded() as r:
        jax.block_until_ready(cases["pow_int"]())
    assert r.of("h2d") == []
    assert [o.name for o in r.ops][:1] == ["power"]


def test_a_replicated_put_is_one_leg_per_device(cases):
    with recorded() as r:
        jax.block_until_ready(cases["replicate"]())
    legs = sorted((t.src, t.dst, t.bytes) for t in r.of("d2d"))
    assert legs == [("cpu:0", f"cpu:{d}", 16) for d in range(N)]  # the leg onto cpu:0 included


def test_jaxs_inner_jitted_helpers_stay_transparent():
    """While the hooks are in, a ``jax._src`` jitted helper is a proxy that forwards what the
    plain one has: its name, ``lower``, binding, repr and pickling (by the plain one's rules)."""
    import pickle

    from jax._src.numpy import util

    plain = util._where
    with recorded():
        proxy = util._where
        assert proxy is not plain and proxy.__name__ == plain.__name__ and repr(proxy) == repr(plain)
        assert proxy.lower(True, 1.0, 0.0).as_text() == plain.lower(True, 1.0, 0.0).as_text()
        try:
            expected = pickle.loads(pickle.dumps(plain))
        except Exception as exc:  # noqa: BLE001 - the plain one's own outcome is the oracle
            with pytest.raises(type(exc)):
                pickle.dumps(proxy)
        else:
            assert pickle.loads(pickle.dumps(proxy)) is expected
    assert util._where is plain


CONVERTED = """\
import jax.numpy as jnp
import numpy as np
from flax import nnx

class Lazy:
    def __init__(self, value):
        self.value = value
    def __jax_array__(self):
        return self.value() if callable(self.value) else self.value

x = jnp.ones(4)
a = x * Lazy(np.arange(4, dtype=np.float32))
b = x + Lazy(lambda: jnp.asarray(np.ones(4, np.float32)))
c = x + nnx.Param(np.ones(4, np.float32))
d = x * nnx.Param(x)
print(float((a + b + c + d).sum()))
"""


@pytest.mark.parametrize("capture", ["native", "python"])
def test_operands_converted_by_jax_are_counted_on_both_paths(tmp_path, capture):
    """An operand JAX converts by its ``__jax_array__`` (a flax ``nnx.Param`` holding NumPy data,
    a user's class), recorded by ``jaxplace run`` on the C and the pure-Python path. By hand:
    ``jnp.ones``' fill value 4 B, then 16 B for each of the three host values; the device-held
    Param nothing: 4 legs, 52 B (JAX's transfer guard logs 4). Before: the fill value alone."""
    script = tmp_path / "converted.py"
    script.write_text(CONVERTED)
    env = child_env()
    env.pop("JAXPLACE_CAPTURE", None)  # "native" is the C path even where the suite runs on Python's
    if capture == "python":
        env["JAXPLACE_CAPTURE"] = capture
    proc = jaxplace("run", "--no-trace", "--quiet", "--out", tmp_path / "run", script, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "run" / "run.json").read_text())["capture"] == capture
    with sqlite3.connect(tmp_path / "run" / "events.sqlite") as conn:
        legs = conn.execute("SELECT bytes FROM transfers WHERE kind = 'h2d' ORDER BY seq").fetchall()
    assert [b for (b,) in legs] == [4, 16, 16, 16]
    guard = python(script, env=child_env(JAX_TRANSFER_GUARD="log"))
    assert guard.returncode == 0 and guard.stderr.count("host-to-device transfer") == 4, guard.stderr[-2000:]


def test_which_operands_are_converted_by_jax():
    """``state.foreign_operand`` (the Python twin of ``capture/_native.c``'s): a type with a
    ``__jax_array__`` in its MRO, not one set to None, and no metaclass code run to find out."""
    from jaxplace_cli.capture.jaxhooks.state import foreign_operand

    class Loud(type):
        def __getattr__(cls, name):
            raise AssertionError(f"ran the metaclass for {name}")

    class Sub(Lazy):
        pass

    class Off(Lazy):
        __jax_array__ = None

    class Plain(metaclass=Loud):
        pass

    x = jnp.ones(2)
    assert foreign_operand((x, Lazy(1.0))) and foreign_operand((Sub(1.0), x)) and foreign_operand((x, nnx.Param(x)))
    assert not any(foreign_operand(args) for args in
                   [(x, 2.0), (x, np.ones(2)), (x, x), (x, Off(1.0)), (x, Plain()), (x, None), (x, [1.0])])
