"""Arrays freed by the cycle collector, recorded (issue 27's memory tracking): the run ends as
under python and every free is stored, on both capture paths.

Found by the accelerator check (bench/accel_check.py, 2026-12-05): the C hot path took its
tracking weakrefs out of the collector's lists, and the first array that died as cyclic garbage
crashed the interpreter (SIGSEGV in the collector's weakref handling) — any program that keeps
an array in an object with a reference cycle and lives long enough for a collection.
tests/scripts/memory/cycles.py has the expected numbers by hand.
"""
import re

import pytest
from conftest import SCRIPTS, child_env, jaxplace, store_rows

CYCLES = SCRIPTS / "memory" / "cycles.py"


def _line(tag: str) -> int:
    lines = CYCLES.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if re.search(rf"# {tag}(:|$)", text))


@pytest.mark.parametrize("capture", ["native", "python"])
def test_arrays_freed_by_the_cycle_collector(tmp_path, capture):
    out = tmp_path / "run"
    proc = jaxplace("run", "-q", "--no-trace", "--out", out, CYCLES, env=child_env(JAXPLACE_CAPTURE=capture))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "total 3675.0\n"  # 3 * (0 + 1 + ... + 49)
    [(made, freed, hows)] = store_rows(
        out, "SELECT COUNT(*), COUNT(f.buf), GROUP_CONCAT(DISTINCT f.how) FROM buffers b"
             " JOIN sites s ON s.id = b.site LEFT JOIN frees f ON f.buf = b.buf WHERE s.line = ?",
        (_line("L-cycle"),))
    # each iteration makes two arrays on that line (jnp.ones(3), then * i); both are freed by
    # the end, the ones at once (reference count), the product with its node (the collector)
    assert (made, freed, hows) == (100, 100, "gc")
