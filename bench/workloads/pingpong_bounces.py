"""P7 workload: one array bounced between two devices N times (N device-to-device moves).

Like sample_scripts/pingpong_eager.py, at scale: each iteration moves a 4 KiB array to device 0,
multiplies it there and moves it back to device 1 (2 bounces per iteration). Every move
extends the array's history, which the ping-pong rule follows along the data flow: the run the
audit of issue 15 measured (16k bounces needed 1.06 GB before histories were shared).

    jaxplace run --devices 2 bench/workloads/pingpong_bounces.py --bounces 16384
"""
from __future__ import annotations

import argparse

import jax
import numpy as np
from _common import emit, now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bounces", type=int, default=16384, help="device-to-device moves (even)")
    a = ap.parse_args()
    d0, d1 = jax.devices()[:2]
    b = jax.device_put(np.ones((32, 32), np.float32), d1)  # 4 KiB
    t0 = now()
    for _ in range(max(1, a.bounces // 2)):
        b = jax.device_put(jax.device_put(b, d0) * 2, d1)
    b.block_until_ready()
    emit({"workload": "pingpong_bounces", "bounces": 2 * max(1, a.bounces // 2), "loop_s": now() - t0})


if __name__ == "__main__":
    main()
