"""The contract every stage shares: no I/O, no JAX.

``events`` (the event NamedTuples; the store's columns are generated from them), ``raw`` (the
hot path's raw rows before the store formats them), ``errors`` (one base class carrying its
exit code), ``sizes`` and ``paths`` (how sizes and source paths are parsed and shown).
"""
