"""Fidelity corpus: jax.scipy solvers on host data (float64 NumPy with x64 off).

Expected, by hand: A is 64 x 64 and b is 64, float64 on the host, float32 on the device.
* h2d: jnp.asarray(A) 64 x 64 x 4 = 16,384 B and jnp.asarray(b) 64 x 4 = 256 B, once each;
  the solvers then run on device data (no more uploads of note);
* d2h: one np.asarray per solution (4 x 256 B, 64 float32) and one 4 B float() per check.
"""
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax.scipy.sparse.linalg import cg

rng = np.random.default_rng(0)
m = rng.standard_normal((64, 64))
A_host = m @ m.T + 64 * np.eye(64)  # symmetric positive definite, float64
b_host = rng.standard_normal(64)

A = jnp.asarray(A_host)
b = jnp.asarray(b_host)
L = jnp.linalg.cholesky(A)
solutions = {
    "triangular": jsl.solve_triangular(L.T, jsl.solve_triangular(L, b, lower=True), lower=False),
    "cho_solve": jsl.cho_solve(jsl.cho_factor(A), b),
    "lu_solve": jsl.lu_solve(jsl.lu_factor(A), b),
    "cg": cg(A, b, tol=1e-6)[0],
}
for name, x in solutions.items():
    residual = float(jnp.linalg.norm(A @ x - b) / jnp.linalg.norm(b))
    print(f"{name}: residual below 1e-3 {residual < 1e-3}, "
          f"matches numpy {np.allclose(np.asarray(x), np.linalg.solve(A_host, b_host), atol=1e-3)}")
