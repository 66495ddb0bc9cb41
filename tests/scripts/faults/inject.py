"""Run `jaxplace ARGS` in this process with a fault injected at a chosen point of jaxplace's
own work, so a test can hit a window too short to reach with a timed signal:

    python inject.py WHEN SIGNAL -- run ARGS...

WHEN: ``start`` (while the hooks are being installed, before the script runs) or
``finalize`` (while the final manifest is written, after the script ended).
"""
import os
import signal
import sys

when, signame, sep, *argv = sys.argv[1:]
assert sep == "--", "usage: inject.py WHEN SIGNAL -- ARGS"
sig = getattr(signal, signame)

import jaxplace_cli.capture.jaxhooks as hooks  # noqa: E402
import jaxplace_cli.capture.session as session  # noqa: E402

if when == "start":
    real_install = hooks.install

    def install(*args, **kwargs):
        report = real_install(*args, **kwargs)
        os.kill(os.getpid(), sig)
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            pass
        return report

    hooks.install = install
elif when == "finalize":
    real_write = session.write_manifest

    def write_manifest(path, manifest):
        if manifest.status != "running":
            os.kill(os.getpid(), sig)
            for _ in range(1000):
                pass
        return real_write(path, manifest)

    session.write_manifest = write_manifest
else:
    sys.exit(f"unknown injection point {when!r}")

from jaxplace_cli.cli.main import main  # noqa: E402

main(argv)
