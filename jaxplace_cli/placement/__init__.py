"""Placement: policies decide where each op runs; the placer moves data and records it.

``load_policy(spec)`` turns a ``--policy`` string (or a Python object) into a Policy;
``Placer`` applies it inside the dispatch hooks; ``device_placement`` is the library API.
"""
from .errors import PolicyError, PolicyLoadError
from .opinfo import OpInfo
from .policies import load_policy

__all__ = ["OpInfo", "PolicyError", "PolicyLoadError", "load_policy"]
