"""`make gpu-check` (bench/gpu_check.py): skipped with a clear reason without a GPU; and its
comparison machinery, run here on the CPU backend, where the native trace holds no memcpy
events, so jaxplace's transfers and the trace's honestly differ."""
import importlib.util

from conftest import REPO, SCRIPTS, python

GPU_CHECK = REPO / "bench" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", GPU_CHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_skipped_without_a_gpu():
    mod = _module()
    n, seen = mod.gpu_devices()
    assert (n, seen) == (0, "cpu")  # this machine: the CPU backend only
    proc = python(GPU_CHECK)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("gpu-check: skipped: no GPU (JAX sees: cpu); the CPU backend has no "
                           "memcpy events to compare jaxplace's transfers with\n")


def test_comparison_reports_each_kind(tmp_path):
    verdict, lines = _module().check(SCRIPTS / "x64_scalars.py", tmp_path)
    # x64_scalars.py uploads 8 (jnp.ones' fill value) + 8 + 8 + 1 B (Python scalars, x64 on): 4 legs
    # in JAX's transfer guard log; a CPU trace has no memcpy
    assert verdict == "differs"
    assert lines[0] == "  h2d: jaxplace 4 / 25 B   trace memcpy 0 / 0 B   DIFFERS"
    assert lines[1].startswith("  d2h: jaxplace 1 / ")
