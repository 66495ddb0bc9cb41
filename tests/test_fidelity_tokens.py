"""The runtime token of an ordered effect (capture/jaxhooks/callbacks.py make_token_input):
JAX's transfer guard logs one 0-byte host-to-device leg per call of a jitted function with an
ordered effect; jaxplace records the same legs, at the call's line. Found by the accelerator
check on a TPU (bench/accel_check.py) and the same on the CPU backend."""
import re
import sys

from conftest import GUARD_ORACLE, SCRIPTS, child_env, jaxplace, store_rows

SCRIPT = SCRIPTS / "ordered_effects.py"


def test_ordered_effect_tokens_are_the_guards_legs(tmp_path):
    import subprocess

    oracle = subprocess.run([sys.executable, "-c", GUARD_ORACLE, str(SCRIPT)], capture_output=True, text=True,
                            env=child_env(JAX_TRANSFER_GUARD="log_explicit"), timeout=240, cwd=tmp_path)
    assert oracle.returncode == 0, oracle.stderr[-2000:]
    guard = len(re.findall(r"host-to-device transfer: aval=ShapedArray\(bool\[0\]\)", oracle.stderr))
    assert guard == 3  # by hand: one per call (the script's docstring)

    out = tmp_path / "run"
    proc = jaxplace("run", "-q", "--no-trace", "--out", out, SCRIPT, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == oracle.stdout, proc.stderr[-2000:]
    line = next(i for i, t in enumerate(SCRIPT.read_text().splitlines(), 1) if "# L-call" in t)
    rows = store_rows(out, "SELECT t.kind, t.dst, t.bytes, t.implicit, t.api, s.line FROM transfers t"
                           " JOIN sites s ON s.id = t.site WHERE t.api LIKE '%ordered-effects token%'")
    assert rows == [("h2d", "cpu:0", 0, 1, "jit(g) (ordered-effects token)", line)] * guard
