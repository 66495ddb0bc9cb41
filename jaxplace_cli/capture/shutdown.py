"""What python does between the end of a script's body and its exit, done by jaxplace before it
saves the run (capture/session.py) and before it dies of a Ctrl-C (runner.exit_like_python):
the wait for the script's non-daemon threads. Their work is the script's; under jaxplace it ran
after the recording had closed, and was lost."""
from __future__ import annotations

import sys
import threading


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError):  # closed (None) or broken: python says nothing
        pass


def _text(exc: BaseException) -> str:
    """``str(exc)``, or what python's traceback prints when that raises."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - the script's __str__
        return "<exception str() failed>"


def threads_pending() -> bool:
    """Whether python's exit would wait for something: a non-daemon thread of the script still
    running (an executor's queued work has its workers alive; its exit hook, registered when
    ``concurrent.futures`` is imported, has nothing to wait for without them)."""
    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())


def wait_for_threads() -> None:
    """What python does first when the script's body has ended: ``threading._shutdown()``, the
    executors' exit hooks, then a join of every non-daemon thread (their work is the script's:
    under jaxplace it ran after the recording had closed, and was lost). Python calls it again
    at its own exit, where it returns at once. An exception in it (a Ctrl-C while it waits) is
    reported as python reports it, "Exception ignored in: <module 'threading' ...>", and the
    exit goes on without the threads, as python's does."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:
        return
    try:
        shutdown()
    except BaseException as exc:  # noqa: BLE001 - python prints it and goes on
        # once, as python's: interrupted, its own call at exit (and exit_like_python's) would
        # run the executors' hooks and join their workers again (a Ctrl-C that did not end it)
        threading._shutdown = _done
        _ignored_in(threading, exc)


def _done() -> None:
    """``threading._shutdown`` once it was interrupted: python does not call it twice."""


def _ignored_in(obj, exc: BaseException) -> None:
    """python's default ``sys.unraisablehook`` text for ``exc`` raised in ``obj``."""
    import traceback

    stream = sys.stderr
    if stream is None:
        return
    name = type(exc).__qualname__
    module = type(exc).__module__
    if module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # from the callee's frame
    try:
        _flush_stdout()  # python writes the script's pending output first
        stream.write(f"Exception ignored in: {obj!r}\n")
        if tb is not None:
            stream.write("Traceback (most recent call last):\n" + "".join(traceback.format_tb(tb)))
        stream.write(f"{name}: {_text(exc)}\n")
        stream.flush()
    except (OSError, ValueError):
        pass
