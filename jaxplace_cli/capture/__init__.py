"""What runs inside the user's process: the runner (``python``'s behaviour), the session that
records a run, the recorder the hooks write into, child-process recording, and ``jaxhooks/``
— the only package that imports JAX internals (``jax._src``)."""
