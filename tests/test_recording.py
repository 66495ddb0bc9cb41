"""capture.recording.Recording, the one holder of JAX's hooks (issue 23): the first holder
installs them, the last removes them, the most recent holder with a recorder records, and
``jaxplace run``, ``budget()``, ``device_placement`` and the pytest plugin's inert hooks nest in
any order. Real JAX on the 4 simulated CPU devices of conftest, in this process."""
from __future__ import annotations

import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import pytest
from conftest import REPO, child_env

from jaxplace_cli.capture.jaxhooks.state import active
from jaxplace_cli.capture.recorder import Recorder
from jaxplace_cli.capture.recording import Recording, holders, installed_record
from jaxplace_cli.model.events import OpEvent

# made before any hooks: JAX's own PjitFunction, which only an adopting holder records
_module_jit = jax.jit(lambda x: x * 3)
JAX_JIT = jax.jit  # JAX's own, as this module saw it without hooks


def _hooked() -> bool:
    return jax.jit is not JAX_JIT


def _op_names(rec: Recorder) -> list[str]:
    return [OpEvent._make(o[:13]).name for o in rec.drain()["ops"]]


@pytest.fixture(autouse=True)
def no_hooks_around():
    """Each test starts and must end with JAX as it was: no holder, no hook, no recorder."""
    assert holders() == 0 and not _hooked()
    yield
    assert holders() == 0, "a test left a holder behind"
    assert not _hooked() and active.rec is None and installed_record() is None


def test_first_holder_installs_last_removes_innermost_records(jax_devices):
    outer, inner = Recorder(), Recorder()
    with Recording(outer) as a:
        assert _hooked() and holders() == 1 and active.rec is outer
        with Recording(inner) as b:
            assert holders() == 2 and active.rec is inner
            assert b.report is a.report  # one install, shared
        assert _hooked() and active.rec is outer  # the inner holder left; the hooks stay
    assert not _hooked()


def test_recorders_get_exactly_their_blocks_ops(jax_devices):
    outer, inner = Recorder(), Recorder()
    with Recording(outer):
        jnp.sin(jnp.ones(3))
        with Recording(inner):
            jnp.cos(jnp.ones(3))
        jnp.tan(jnp.ones(3))
    outer_names, inner_names = _op_names(outer), _op_names(inner)
    assert {"sin", "tan"} <= set(outer_names) and "cos" not in outer_names
    assert "cos" in inner_names and not {"sin", "tan"} & set(inner_names)


def test_out_of_order_stop_keeps_the_others_choice(jax_devices):
    a_rec, b_rec = Recorder(), Recorder()
    a, b = Recording(a_rec), Recording(b_rec)
    a.start()
    b.start()
    a.stop()  # another thread's block ending first
    assert _hooked() and active.rec is b_rec
    a.stop()  # twice: nothing more
    assert holders() == 1
    b.stop()


def test_inert_hold_keeps_hooks_without_recording(jax_devices):
    hold = Recording(inert=True)
    hold.start()
    try:
        assert _hooked() and active.rec is None
        rec = Recorder()
        with Recording(rec):  # budget() inside a pytest session
            jnp.sin(jnp.ones(3))
        assert _hooked() and active.rec is None  # inert again, hooks still in
        assert "sin" in _op_names(rec)
    finally:
        hold.stop()


def test_placement_inside_inert_hooks_keeps_them(jax_devices):
    """device_placement in a pytest session with inert hooks places through a scratch recorder
    and leaves the session's hooks installed (it used to remove them on its way out)."""
    from jaxplace_cli import device_placement, where

    hold = Recording(inert=True)
    hold.start()
    try:
        with device_placement("pin:cpu:2"):
            assert active.rec is not None  # the hooks place only what they record
            y = jnp.ones(4) + 1
        assert where(y) == "cpu:2"
        assert _hooked() and active.rec is None and holders() == 1
    finally:
        hold.stop()


def test_placement_inside_budget_records_into_the_budget(jax_devices):
    from jaxplace_cli import budget, device_placement, where

    with budget():
        outer = active.rec
        with device_placement("pin:cpu:1"):
            assert active.rec is outer  # placement borrows the budget's recorder
            y = jnp.ones(4) * 2
        assert where(y) == "cpu:1" and active.rec is outer


def test_budget_inside_placement(jax_devices):
    from jaxplace_cli import budget, device_placement, where

    with device_placement("pin:cpu:3"):
        scratch = active.rec
        with budget(d2h=0):
            assert active.rec is not scratch
            y = jnp.ones(4) - 1
        assert active.rec is scratch
    assert where(y) == "cpu:3"


def test_exception_passes_through_and_hooks_go(jax_devices):
    with pytest.raises(ZeroDivisionError):
        with Recording(Recorder()):
            with Recording():
                1 / 0


def test_placements_of_two_threads_ending_out_of_order(jax_devices):
    """Thread A's block installs the hooks and ends while thread B's is still open: B stays
    placed (its holder keeps the hooks live), and the hooks go when B ends."""
    from jaxplace_cli import device_placement, where

    b_in, a_out = threading.Event(), threading.Event()
    seen: dict = {}

    def thread_a():
        with device_placement("pin:cpu:1"):
            b_in.wait(60)
        a_out.set()

    def thread_b():
        with device_placement("pin:cpu:2"):
            b_in.set()
            a_out.wait(60)
            seen["b"] = where(jnp.ones(4) + 1)

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    threads[0].start()
    threads[1].start()
    for t in threads:
        t.join(120)
    assert seen == {"b": "cpu:2"}


def test_adopted_jit_is_recorded_then_given_back(jax_devices):
    """A holder that installs the hooks wraps the caller's module-level jit functions made
    before them, and puts JAX's back when the hooks go."""
    rec = Recorder()
    with Recording(rec, adopt_jits=True):
        assert type(_module_jit).__name__ == "JitFunction"
        _module_jit(jnp.ones(3)).block_until_ready()
    assert type(_module_jit).__name__ == "PjitFunction"
    assert any("<lambda>" in n for n in _op_names(rec))


def test_a_local_jit_cannot_be_adopted_and_the_warning_names_the_callers_line(jax_devices):
    from jaxplace_cli.integrations.placement import PlacementWarning

    local = _module_jit  # held in a local variable only: a global would be rewrapped
    with pytest.warns(PlacementWarning, match="'local'") as warned:
        with Recording(Recorder(), adopt_jits=True):
            assert local is not _module_jit
    assert local is _module_jit
    assert [w.filename for w in warned] == [__file__]


def test_adoption_only_by_the_installing_holder(jax_devices):
    """Hooks already in (jaxplace run, a pytest session): every jit the user made since is
    hooked, and nothing is rewrapped."""
    with Recording(Recorder()):
        with Recording(Recorder(), adopt_jits=True):
            assert type(_module_jit).__name__ == "PjitFunction"


def test_importing_recording_imports_nothing_of_jax():
    code = "import sys, jaxplace_cli.capture.recording; print(sorted(m for m in sys.modules if m.split('.')[0] == 'jax'))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=child_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
