"""diffrax as its docs show it: dy/dt = -y solved with Tsit5 and a PID step size controller,
saved at a few times."""
import diffrax
import jax.numpy as jnp


def vector_field(t, y, args):
    return -args * y


term = diffrax.ODETerm(vector_field)
sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), t0=0.0, t1=1.0, dt0=0.1, y0=jnp.array([1.0, 2.0]),
                          args=1.0, saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 1.0, 3)),
                          stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5))
print("y(1)", [round(float(v), 4) for v in sol.ys[-1]])
