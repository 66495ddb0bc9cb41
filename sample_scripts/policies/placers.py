"""Python placement policies (used with --policy sample_scripts/policies/placers.py:NAME)."""


class RoundRobinPlacer:
    """The literal round-robin placer: every op to the next device, whatever its data."""

    def __init__(self, n_devices: int = 4):
        self.n = n_devices
        self.i = 0

    def __call__(self, op, *args):
        device = f"cpu:{self.i % self.n}"
        self.i += 1
        return device


def layer_placer(op, occurrence, line):
    """Layer i's matmul on device i mod 4; other ops follow their data (JAX decides)."""
    if op == "dot_general":
        return f"cpu:{occurrence % 4}"
    return None


def failing_placer(op, shape):
    """A policy with a bug, to show how jaxplace reports it."""
    if op == "dot_general":
        return {"not": "a device"}[shape]
    return None
