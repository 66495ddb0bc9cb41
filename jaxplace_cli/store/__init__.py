"""The run directory and its events store: the only SQL in jaxplace.

``layout`` (run-dir names, manifest read/write), ``sqlite`` (schema generated from
model/events.py, writer, reader), ``queries`` (the analyses' read queries), ``rows`` (raw capture rows -> stored rows), ``writer_process``
(the child process that writes during ``jaxplace run``). Nothing here imports JAX.
"""
