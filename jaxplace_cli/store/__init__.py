"""The run directory and its events store: the only SQL in jaxplace.

``layout`` (run-dir names, manifest read/write), ``sqlite`` (schema generated from
model/events.py, writer, reader), ``rows`` (raw capture rows -> stored rows), ``writer_process``
(the child process that writes during ``jaxplace run``), ``queries`` (read queries the analyses
ask for). Nothing here imports JAX.
"""
