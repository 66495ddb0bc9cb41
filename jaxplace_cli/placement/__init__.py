"""Placement: policies decide where each op runs; the placer moves data and records it.

``load_policy(spec)`` turns a ``--policy`` string (or a Python object) into a Policy;
``Placer`` applies it inside the dispatch hooks; ``device_placement`` is the library API.

Only the error classes are imported eagerly: ``jaxplace run`` needs ``PolicyError`` for every
run, the policy machinery (rules files, TOML) only for runs with a policy.
"""
from jaxplace_cli.placement.errors import PolicyError, PolicyLoadError

__all__ = ["OpInfo", "PolicyError", "PolicyLoadError", "load_policy"]


def __getattr__(name):
    if name == "OpInfo":
        from jaxplace_cli.placement.opinfo import OpInfo

        return OpInfo
    if name == "load_policy":
        from jaxplace_cli.placement.policies import load_policy

        return load_policy
    raise AttributeError(f"module 'jaxplace_cli.placement' has no attribute {name!r}")
