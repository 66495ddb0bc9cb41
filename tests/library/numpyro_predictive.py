"""numpyro as its docs show it: a regression model with numpyro.sample and plate, prior
samples drawn with Predictive, the log density of one draw with numpyro.infer.util."""
import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import Predictive
from numpyro.infer.util import log_density


def model(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("obs", dist.Normal(w * x, sigma), obs=y)


x = np.linspace(0, 1, 20).astype(np.float32)
prior = Predictive(model, num_samples=8)(jax.random.PRNGKey(0), x)
print("prior obs", prior["obs"].shape)
ld, _ = log_density(model, (x,), {"y": 2.0 * x}, {"w": 2.0, "sigma": 0.5})
print("log density", round(float(ld), 2))
