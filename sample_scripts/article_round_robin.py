"""The article's RoundRobinPlacer: a class whose ``__call__(self, op, *args)`` hands out the
devices in turn, used with ``jax.device_placement``.

``heavy_computation`` is a module-level ``@jax.jit`` function defined before the ``with`` block:
under plain python it was made before jaxplace's hooks existed, and device_placement still
places it (the same as under ``jaxplace run``). Three calls: device 0, device 1, device 0.

    jaxplace run --devices 2 sample_scripts/article_round_robin.py
"""
import itertools
import sys

import jax
import jax.numpy as jnp
import jaxplace_cli
from jaxplace_cli import where

jaxplace_cli.install_jax_alias()


class RoundRobinPlacer:
    def __init__(self, devices):
        self.cycle = itertools.cycle(devices)
        self.asked = []  # what each op was called, by its name as dispatched

    def __call__(self, op, *args):
        self.asked.append(op.name)
        return next(self.cycle)


@jax.jit
def heavy_computation(x):
    return jnp.tanh(x @ x.T).sum(axis=0)


def main():
    devices = jax.devices()[:2]
    if len(devices) < 2:
        sys.exit("article_round_robin.py needs two devices: run it with `jaxplace run --devices 2 ...`")
    data1, data2, data3 = (jnp.full((128, 128), i / 128.0) for i in (1, 2, 3))
    placer = RoundRobinPlacer(devices)
    with jax.device_placement(placer):
        result1 = heavy_computation(data1)  # device 0
        result2 = heavy_computation(data2)  # device 1
        result3 = heavy_computation(data3)  # device 0 again
    print("placed", where([result1, result2, result3]), "asked about", placer.asked)
    host = jax.device_get([result1, result2, result3])  # one read of all three
    print("sums", [round(float(r.sum()), 3) for r in host])


if __name__ == "__main__":
    main()
