"""Under ``jaxplace launch -n 2``: process 0's main thread blocks SIGINT and sleeps — like a
main thread blocked in a collective whose peer died, it never returns to Python to act on the
SIGINT launch sends. Process 1 waits until process 0 is blocked, then exits 3.

    jaxplace launch -n 2 stuck.py FLAG_FILE
"""
import os
import signal
import sys
import time

flag = sys.argv[1]
if os.environ["JAXPLACE_PROCESS_INDEX"] == "0":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    open(flag, "w").close()
    time.sleep(120)
    sys.exit(0)
deadline = time.monotonic() + 60
while not os.path.exists(flag) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(3)
