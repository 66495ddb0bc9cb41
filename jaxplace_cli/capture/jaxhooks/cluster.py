"""``jax.distributed`` under ``jaxplace launch``, through JAX's own cluster detection.

``jax.distributed.initialize()`` called with no arguments asks each ``ClusterEnv`` subclass
(``jax._src.clusters``: Open MPI, SLURM, mpi4py, Cloud TPU, Kubernetes) in turn whether its
environment is present, and takes the coordinator address, process count and process id from
the first that is. JAX's docstring names this the extension point ("ClusterEnv subclasses
are automatically detected when imported"). ``register()`` adds one more environment, present
only when ``jaxplace launch`` started this process (``JAXPLACE_LAUNCH_COORDINATOR`` set), and
puts it first: a launch started inside a SLURM allocation or an ``mpirun`` must use the
addresses the launch chose, not the allocation's. Nothing else in JAX changes; a script that
passes its own arguments to ``initialize`` keeps them (JAX only asks for the unset ones).

``state()`` reads what ``jax.distributed`` was initialised with, without initialising anything.
"""
from __future__ import annotations

import os

LAUNCH_COORDINATOR = "JAXPLACE_LAUNCH_COORDINATOR"  # set by `jaxplace launch` only
PROCESS_INDEX = "JAXPLACE_PROCESS_INDEX"
PROCESS_COUNT = "JAXPLACE_PROCESS_COUNT"
CLUSTER_NAME = "jaxplace"


def register() -> bool:
    """Make ``jax.distributed.initialize()`` find the launch's coordinator, count and index.
    Idempotent; False when this JAX has no ``ClusterEnv`` to extend (then the script's own
    arguments, or ``JAX_COORDINATOR_ADDRESS`` alone, are what JAX gets)."""
    try:
        from jax._src import clusters
    except Exception:
        return False
    base = getattr(clusters, "ClusterEnv", None)
    types = getattr(base, "_cluster_types", None)
    if base is None or not isinstance(types, list):
        return False
    cls = next((t for t in types if getattr(t, "name", "") == CLUSTER_NAME), None)
    if cls is None:
        cls = _define(base)  # __init_subclass__ appends it to _cluster_types
    if cls in types:
        types.remove(cls)
    types.insert(0, cls)
    return True


def _define(base):
    class JaxplaceLaunchCluster(base):
        """The processes of one ``jaxplace launch`` (environment set by cli/launch.py)."""

        name: str = CLUSTER_NAME
        opt_in_only_method: bool = False

        @classmethod
        def is_env_present(cls) -> bool:
            return all(k in os.environ for k in (LAUNCH_COORDINATOR, PROCESS_INDEX, PROCESS_COUNT))

        @classmethod
        def get_coordinator_address(cls, timeout_secs=None, override_coordinator_port=None) -> str:
            return os.environ[LAUNCH_COORDINATOR]

        @classmethod
        def get_process_count(cls) -> int:
            return int(os.environ[PROCESS_COUNT])

        @classmethod
        def get_process_id(cls) -> int:
            return int(os.environ[PROCESS_INDEX])

        @classmethod
        def get_local_process_id(cls):
            return None  # every process sees all its local devices (--devices-per-process)

    return JaxplaceLaunchCluster


def state() -> dict | None:
    """``{process_index, process_count, coordinator}`` once ``jax.distributed.initialize`` ran
    in this process (also after ``shutdown``); None when it never did."""
    try:
        from jax._src import distributed
    except Exception:
        return None
    s = getattr(distributed, "global_state", None)
    if s is None or getattr(s, "coordinator_address", None) is None:
        return None
    return {"process_index": int(s.process_id), "process_count": int(s.num_processes),
            "coordinator": str(s.coordinator_address)}
