"""The trace window's modes and defaults (``--trace``, ``--trace-seconds``, ``--trace-ops``).

A module of their own: ``jaxplace run``'s command line needs them before the script runs, and
the window itself (``jaxhooks/trace_window.py``) is in the hooks' package, whose import
brings numpy. Imported before the script, numpy would start its threads before the script
could set ``OPENBLAS_NUM_THREADS`` (docs/reliability.md).
"""
WINDOW = "window"
FULL = "full"
OFF = "off"
TRACE_MODES = (WINDOW, FULL, OFF)
# The window's defaults (``--trace-seconds``, ``--trace-ops``). Its cost is mostly stop_trace's
# export, ~0.8 ms per traced op of the P1 step (measured in one process, 7 alternations:
# 100 steps +80-120 ms, i.e. ~5-7 % of P1's 1,500-step loop, the "window costs ~10 % of the
# loop" of issue 18; 20 steps +12-17 ms). 25 ops keep it near 1 % and still sample a step.
TRACE_SECONDS = 1.0
TRACE_OPS = 25
