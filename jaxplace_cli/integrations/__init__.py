"""jaxplace inside other people's code: the ``device_placement``/``where`` library API, the
``budget()`` context manager, and the opt-in pytest plugin."""
