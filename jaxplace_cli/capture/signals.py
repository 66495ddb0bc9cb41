"""Signals during a recorded run: the run is saved before a fatal signal kills the process,
signals that come while it is being saved are held until it is, and Ctrl-C is python's own
(capture/session.py installs these)."""
from __future__ import annotations

import _thread
import functools
import os
import signal
import sys
import threading
import time

# Signals whose default action kills python without any cleanup: the run is saved first, then
# the process dies of the same signal (same status as plain python). SIGINT is python's own
# KeyboardInterrupt; all of these are held while the run is being saved.
FATAL_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1")
                      if hasattr(signal, n))
_HELD_SIGNALS = (signal.SIGINT, *FATAL_SIGNALS)
# python's own: ``install_fatal`` puts a script's view over the module's functions
_real_signal, _real_getsignal = signal.signal, signal.getsignal


def install_fatal(ours) -> None:
    """``ours`` (the run's saver) as the handler of each fatal signal whose handler is the
    default (one ignored under nohup, or set by the script later, is left alone), unseen by the
    script: ``signal.getsignal`` reads it as SIG_DFL and ``signal.signal`` returns SIG_DFL in its
    place, as under python (a script that printed the handler printed jaxplace's bound method;
    one that installs its own only over the default did not), and setting SIG_DFL puts ``ours``
    back: the process dies the same way, after the run is saved."""
    mine = set()
    for sig in FATAL_SIGNALS:
        try:
            if _real_getsignal(sig) in (signal.SIG_DFL, None):
                _real_signal(sig, ours)
                mine.add(sig)
        except (ValueError, OSError):  # not the main thread
            pass
    if not mine:
        return

    @functools.wraps(_real_getsignal)
    def getsignal(signalnum):
        handler = _real_getsignal(signalnum)
        return signal.SIG_DFL if signalnum in mine and handler == ours else handler

    @functools.wraps(_real_signal)
    def set_handler(signalnum, handler):
        if signalnum in mine and not callable(handler) and handler == signal.SIG_DFL:
            handler = ours
        previous = _real_signal(signalnum, handler)
        return signal.SIG_DFL if signalnum in mine and previous == ours else previous

    signal.getsignal, signal.signal = getsignal, set_handler


def _hold_signals(held: list) -> dict:
    """Replace the held signals' handlers by ones that only note the signal (main thread)."""
    previous = {}
    if threading.get_ident() != threading.main_thread().ident:  # get_ident: registers no thread
        return previous
    for sig in _HELD_SIGNALS:
        try:
            previous[sig] = _real_signal(sig, lambda signum, frame: held.append(signum))
        except (ValueError, OSError, TypeError):
            pass
    return previous


def _release_signals(previous: dict, held: list, outcome) -> None:
    """Restore the handlers, then act on a signal that came while saving."""
    for sig, handler in previous.items():
        try:
            _real_signal(sig, handler if handler is not None else signal.SIG_DFL)
        except (ValueError, OSError, TypeError):
            pass
    fatal = [s for s in held if s in FATAL_SIGNALS]
    if fatal:
        _die_of(fatal[0])
    elif signal.SIGINT in held and outcome.status not in ("interrupted", "terminated"):
        signal.raise_signal(signal.SIGINT)


def _die_of(signum: int) -> None:
    """End the process by ``signum``'s default action, as python without a handler would."""
    _real_signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def resend_dropped_ctrl_c(previous):
    """A ``sys.unraisablehook`` over ``previous``: a KeyboardInterrupt python drops — one raised
    in a gc callback or a ``__del__``, where python prints "Exception ignored" and the script
    goes on — is sent again a few milliseconds later, when that code has returned; anything
    else goes to ``previous``.

    JAX registers a gc callback, and the many small objects the hooks create make collections
    frequent, so under recording about one Ctrl-C in five landed there (measured 2 of 10; plain
    python 0 of 10). This was a SIGINT handler of jaxplace's own before: then
    ``signal.getsignal(SIGINT)`` was not python's ``default_int_handler``, and ``asyncio.run``,
    which checks that, installed no handler of its own (a Ctrl-C raised KeyboardInterrupt
    inside the loop instead of cancelling the main task)."""

    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):  # named: no number of the script's Thread-N
            _thread.start_new_thread(_sigint_soon, ())  # unseen by the script's threading.enumerate()
            return
        previous(unraisable)

    hook.previous = previous
    _RESENDING.append(hook)
    return hook


_RESENDING: list = []  # the hooks resend_dropped_ctrl_c made


def stop_resending() -> None:
    """Once the script's body has ended: python's hook back where it is still jaxplace's. A
    Ctrl-C in an atexit handler or while python waits for the script's threads is dropped by
    python, with "Exception ignored"; re-sent, it killed the exit half-way."""
    while _RESENDING:
        hook = _RESENDING.pop()
        if sys.unraisablehook is hook:
            sys.unraisablehook = hook.previous


def _sigint_soon() -> None:
    time.sleep(0.005)  # the code that dropped it has returned by then
    os.kill(os.getpid(), signal.SIGINT)
