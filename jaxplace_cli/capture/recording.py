"""The one way jaxplace's JAX hooks go into and out of a process: ``Recording``.

Every user holds one — ``jaxplace run`` (capture/session.py), ``budget()``,
``device_placement``, the pytest plugin's session-wide inert hooks, the tests' in-process
recorder — so uses nest in any order and across threads: the first to start installs the
hooks, the last to stop removes them (reference counted, under one lock). Like memray's
``Tracker`` or pyinstrument's ``Profiler``: one object, a ``with`` block or ``start()`` and
``stop()``; an exception inside the block passes through.

The hooks read one process-wide recorder (``state.active.rec``). Which one is decided here,
after every start and stop: the most recently started holder that brought its own recorder;
else, while some holder needs the hooks live (a placement: the hooks place only what they
record), a bounded scratch recorder that nothing reads; else none, and the hooks are inert (one
attribute check per call). A holder that stops out of order (another thread's block) leaves
the others' choice intact.

Importing this module imports neither JAX nor the hooks: installing jaxplace changes nothing
for a process that does not use it.
"""
from __future__ import annotations

import os
import threading

SCRATCH_ROWS = 100_000  # the scratch recorder keeps at most this many rows of each kind

_lock = threading.RLock()
_holders: list[Recording] = []  # started and not yet stopped, in start order
_installed: dict = {}  # "report": the HookReport of the hooks in place, "record": their mode
_scratch: list = []  # the scratch recorder, while one is in use


class Recording:
    """Hold the hooks for a block, recording into ``recorder``.

    ``recorder=None``: record into whatever records already (``jaxplace run``'s recorder, an
    enclosing ``budget()``), else into the scratch recorder. ``inert=True``: only keep the
    hooks installed (a pytest session: jit functions made at import time are then hooked).
    ``record``: the hooks' mode (``jaxhooks.install``) when this holder installs them; a
    holder that finds them installed uses them as they are. ``placer``: the placement engine
    of ``--policy``, active for every thread while held. ``adopt_jits``: when this holder
    installs the hooks, wrap the user's module-level jit functions made before them
    (``jaxhooks.adopt``) until the hooks are removed."""

    def __init__(self, recorder=None, record: str = "all", *, inert: bool = False, placer=None,
                 adopt_jits: bool = False):
        self.recorder = recorder
        self.record = record
        self.live = not inert
        self.placer = placer
        self.adopt_jits = adopt_jits
        self.report = None  # the HookReport of the hooks this holder uses
        self._pid = os.getpid()
        self._held = False
        self._previous_placer = None

    def start(self):
        """Install the hooks if no one holds them, make the recorder choice; the HookReport."""
        from jaxplace_cli.capture.jaxhooks import state

        with _lock:
            if self._held:
                raise RuntimeError("this Recording is already started")
            self._pid = os.getpid()
            if not _holders:
                _install(self.record, self.adopt_jits)
            _holders.append(self)
            self._held = True
            self.report = _installed["report"]
            if self.placer is not None:
                self._previous_placer = state.active.placer
                state.active.placer = self.placer
                state.active.placing = True
            _choose_recorder()
        return self.report

    def stop(self, sample: bool = True) -> None:
        """Let go of the hooks (removed when no one else holds them); safe to call twice.
        ``sample``: the devices' memory statistics at the end (not from a signal handler)."""
        from jaxplace_cli.capture.jaxhooks import state

        with _lock:
            if not self._held:
                return
            self._held = False
            _holders.remove(self)
            if self.recorder is not None:  # what is live now is this recording's end state
                from jaxplace_cli.capture.memory import end_recording

                end_recording(self.recorder, sample)
            if self.placer is not None and state.active.placer is self.placer:
                state.active.placer = self._previous_placer
            if _holders:
                _choose_recorder()
            else:
                _uninstall()

    def __enter__(self) -> Recording:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.stop()
        return False


def holders() -> int:
    """How many holders keep the hooks installed now (0: JAX is as it was)."""
    return len(_holders)


def installed_record() -> str | None:
    """The mode of the hooks in place (``"all"``/``"transfers"``), None when none are."""
    return _installed.get("record")


def _install(record: str, adopt_jits: bool) -> None:
    # through the module attribute: tests/scripts/faults/inject.py wraps it to inject a fault
    from jaxplace_cli.capture import jaxhooks

    try:
        _installed["report"] = jaxhooks.install(record)
        _installed["record"] = record
        if adopt_jits:
            from jaxplace_cli.capture.jaxhooks.adopt import adopt_caller_jits

            adopt_caller_jits()
    except BaseException:  # Ctrl-C while installing: JAX is left as it was, then it goes on
        _uninstall()
        raise


def _uninstall() -> None:
    from jaxplace_cli.capture import jaxhooks
    from jaxplace_cli.capture.jaxhooks.adopt import restore_jits

    jaxhooks.uninstall()
    restore_jits()
    _installed.clear()
    _scratch.clear()


def _choose_recorder() -> None:
    """Set ``state.active.rec`` from the holders (see the module docstring). Holders started
    before a fork belong to the parent: a fork child never records into their recorders."""
    from jaxplace_cli.capture.jaxhooks import state

    mine = [h for h in _holders if h._pid == os.getpid()]
    own = [h.recorder for h in mine if h.recorder is not None]
    if not any(h.live and h.recorder is None for h in mine):
        _scratch.clear()  # kept while a borrower may need it again (a budget() inside a placement)
    elif not _scratch:
        from jaxplace_cli.capture.recorder import Recorder

        _scratch.append(Recorder(maxlen=SCRATCH_ROWS))
    state.active.rec = own[-1] if own else (_scratch[0] if _scratch else None)
