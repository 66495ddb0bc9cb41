"""Issue 24: small programs written the way flax, optax, equinox, numpyro and diffrax document
their use (tests/library/), each run under plain python with JAX's transfer guard logging
every leg (``JAX_TRANSFER_GUARD=log_explicit``) and under ``jaxplace run``. The guard is the
oracle: ``jaxplace run`` must print what python printed, end the same, and record exactly the
guard's host->device and device->device legs, count and bytes (the unit is legs:
docs/fidelity.md). The oracle run withholds JAX's C++ fast-path data, so every dispatch takes
the Python path, where the guard names each leg's aval (on the fast path it logs the leg with
no aval): the legs themselves are the same, the bytes become readable.
"""
import sqlite3
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import GUARD_ORACLE, REPO, child_env, jaxplace

sys.path.insert(0, str(REPO / "bench"))
try:
    import accel_check
finally:
    sys.path.remove(str(REPO / "bench"))

LIBRARY = REPO / "tests" / "library"
PROGRAMS = ("optax_fit.py", "flax_nnx.py", "equinox_mlp.py", "numpyro_predictive.py",
            "diffrax_ode.py", "no_upload.py", "flax_linen_loader.py")


def guard_legs(stderr: str) -> dict:
    """{kind: (legs, bytes)} from the guard's lines (bench/accel_check.py's parser: an aval's
    size is its dtype times the shape one device receives)."""
    legs = accel_check.guard_legs(stderr.splitlines())
    assert legs["h2d"][2] == legs["d2d"][2] == 0, "a leg without aval"
    return {k: tuple(legs[k][:2]) for k in ("h2d", "d2d")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import subprocess

    root = tmp_path_factory.mktemp("library")

    def run(program):
        path = LIBRARY / program
        oracle = subprocess.run([sys.executable, "-c", GUARD_ORACLE, str(path)], capture_output=True, text=True,
                                env=child_env(JAX_TRANSFER_GUARD="log_explicit"), timeout=240, cwd=root)
        out = root / program.removesuffix(".py")
        recorded = jaxplace("run", "--no-trace", "--quiet", "--out", out, path, cwd=root)
        return program, (oracle, recorded, out)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, PROGRAMS))


def recorded_legs(out) -> dict:
    con = sqlite3.connect(out / "events.sqlite")
    try:
        rows = dict((r[0], (r[1], r[2] or 0)) for r in con.execute(
            "SELECT kind, COUNT(*), SUM(bytes) FROM transfers GROUP BY kind").fetchall())
    finally:
        con.close()
    return {k: rows.get(k, (0, 0)) for k in ("h2d", "d2d")}


@pytest.mark.parametrize("program", PROGRAMS)
def test_library_program_matches_python_and_the_guard(runs, program):
    oracle, recorded, out = runs[program]
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    assert (recorded.stdout, recorded.returncode) == (oracle.stdout, oracle.returncode), recorded.stderr[-3000:]
    assert recorded_legs(out) == guard_legs(oracle.stderr)


def test_no_phantom_upload(runs):
    """A program whose guard log is empty records no h2d (x ** 2 once was a 4 B upload)."""
    oracle, _, out = runs["no_upload.py"]
    assert guard_legs(oracle.stderr) == {"h2d": (0, 0), "d2d": (0, 0)}
    assert recorded_legs(out)["h2d"] == (0, 0)


# Every transfer label of each program, by hand: the public call that moved it (x + y for an
# operator, jax.nn.initializers.variance_scaling for flax's default kernel initializer, float()
# for a read), never a function inside JAX, the standard library or the library (issue 24).
LABELS = {
    "optax_fit.py": {"float()", "np.asarray()", "jit(step) (numpy argument)", "jnp.zeros (Python scalar)",
                     "jnp.zeros_like (Python scalar)"},
    "flax_nnx.py": {"float()", "jnp.array (host data)", "convert_element_type (Python scalar)",
                    "jax.nn.initializers.variance_scaling", "jit(train_step) (numpy argument)",
                    "jax.random.key (Python scalar)", "x + y (Python scalar)", "jnp.zeros (Python scalar)"},
    "equinox_mlp.py": {"float()", "jit(make_step) (numpy argument)", "jax.random.PRNGKey (Python scalar)",
                       "jax.random.uniform (Python scalar)", "x[i] (Python scalar)", "jnp.zeros (Python scalar)",
                       "jnp.zeros_like (Python scalar)"},
    "numpyro_predictive.py": {"float()", "jnp.log (Python scalar)", "jax.random.PRNGKey (Python scalar)",
                              "scan (numpy argument)", "jnp.sqrt (Python scalar)", "jnp.where (Python scalar)",
                              "jnp.where (numpy argument)", "x * y (Python scalar)", "x * y (numpy argument)",
                              "x + y (Python scalar)", "x - y (Python scalar)", "x - y (numpy argument)"},
    "diffrax_ode.py": {"float()", "jit(diffeqsolve) (reads value)", "jnp.array (host data)",
                       "jit(diffeqsolve) (Python scalar)", "jnp.linspace (Python scalar)", "x[i] (Python scalar)"},
    "no_upload.py": set(),
    "flax_linen_loader.py": {"float()", "str()/print", "convert_element_type (Python scalar)",
                             "jax.nn.initializers.variance_scaling", "jax.random.key (Python scalar)",
                             "jnp.asarray (host data)", "jnp.full (numpy argument)", "x[i] (Python scalar)",
                             "slice (Python scalar)", "jit (numpy argument)", "jnp.ones (Python scalar)",
                             "jit(last) (numpy argument)", "jit(branch) (numpy argument)",
                             "jit(scaled) (numpy argument)"},
}


@pytest.mark.parametrize("program", PROGRAMS)
def test_library_program_labels_are_public(runs, program):
    con = sqlite3.connect(runs[program][2] / "events.sqlite")
    try:
        labels = {a for (a,) in con.execute("SELECT DISTINCT api FROM transfers")}
    finally:
        con.close()
    assert labels == LABELS[program]
