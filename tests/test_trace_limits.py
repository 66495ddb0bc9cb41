"""Traces that are too big, too deep or too odd to read in bounded time and memory (issue 15).

* A trace of 2 GiB or more crashed ``ProfileData.from_file`` (exit 139, no message), and one of
  2 GiB - 1 was read whole (2.2 GB) before a clean error: files over the limit (1 GiB) and log
  dirs over theirs (4 GiB together) are refused after a ``stat``, before any read. The files
  here are sparse (``os.truncate``): nothing real is written, and each audit runs under a
  512 MiB address-space limit, so reading one of them could not succeed.
* A log dir 1,200 levels deep ended in RecursionError ("internal error", exit 3).
* A TPU ``core_details`` stat was decoded with quadratic big-integer arithmetic (a 4 MiB trace
  took ~10 minutes); a 4 MiB trace whose stat is that huge now audits like any other (the time
  is measured by bench/bench_hostile_trace.py, row P7 of bench/run_bench.py, not asserted here).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS, child_env, cli

from jaxplace_cli.sources.xplane import MAX_TRACE_BYTES, MAX_TRACE_DIR_BYTES, MAX_WALK_DEPTH, TraceError, holds_trace
from jaxplace_cli.sources.xplane.files import check_size
from jaxplace_cli.sources.xplane.tpu import MAX_CORE_DETAILS, proto_varints

_spec = importlib.util.spec_from_file_location("xspace", SCRIPTS / "faults" / "xspace.py")
xspace = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(xspace)

GIB = 2**30
MEMORY_LIMIT = 512 * 2**20
REAL_TRACE = (Path(__file__).parent / "data" / "foreign_traces" / "jax08-rocm-mi300x-gemm"
              / "tw003.xplane.pb")


# Sets the limit, then becomes `python -m jaxplace_cli ...` (no preexec_fn: forking a process
# that has JAX's threads and running Python before exec can deadlock).
_UNDER_LIMIT = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({n}, {n})); "
                "os.execv(sys.executable, [sys.executable, '-m', 'jaxplace_cli', *sys.argv[1:]])")


def audit_bounded(target, **env) -> subprocess.CompletedProcess:
    """``jaxplace audit TARGET`` in a child that cannot map more than 512 MiB."""
    return subprocess.run([sys.executable, "-c", _UNDER_LIMIT.format(n=MEMORY_LIMIT), "audit", str(target)],
                          env=child_env(**env), capture_output=True, text=True, timeout=120)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxplace: error: "), proc.stderr[-2000:]
    return lines[0]


def sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb"):
        pass
    os.truncate(path, size)
    return path


# ---------------------------------------------------------------------------- size limits


@pytest.mark.parametrize("size", [2 * GIB + 4096, 2 * GIB, 2 * GIB - 1, GIB + 1],
                         ids=["2GiB+4KiB", "2GiB", "2GiB-1", "1GiB+1"])
def test_a_trace_over_the_limit_is_refused_before_it_is_read(tmp_path, size):
    trace = sparse(tmp_path / "host.xplane.pb", size)
    line = one_error_line(audit_bounded(trace))
    assert line.startswith(f"jaxplace: error: {trace} is ")
    assert f"({size:,} bytes)" in line  # its size
    assert "over the 1.0 GiB (1,073,741,824 bytes) limit for one trace file" in line
    assert "JAXPLACE_MAX_TRACE_BYTES" in line


def test_the_limit_itself_is_allowed_and_one_byte_more_is_not(tmp_path):
    path = tmp_path / "x.xplane.pb"
    assert MAX_TRACE_BYTES == GIB
    check_size(path, GIB)  # exactly the limit: read
    with pytest.raises(TraceError, match=r"\(1,073,741,825 bytes\), over the"):
        check_size(path, GIB + 1)


def test_a_log_dir_over_the_total_limit_is_refused_before_any_file_is_read(tmp_path):
    run = tmp_path / "log" / "plugins" / "profile" / "2025_01_01_00_00_00"
    for i in range(5):  # each exactly at the per-file limit, 5 GiB together
        sparse(run / f"host{i}.xplane.pb", GIB)
    assert MAX_TRACE_DIR_BYTES == 4 * GIB
    line = one_error_line(audit_bounded(tmp_path / "log"))
    assert line == (f"jaxplace: error: the 5 trace files of {run} are 5.0 GiB (5,368,709,120 bytes) "
                    "together, over the 4.0 GiB (4,294,967,296 bytes) limit for one profiling run; "
                    "not read (set JAXPLACE_MAX_TRACE_DIR_BYTES to change it)")


def test_the_limits_can_be_set_by_environment(tmp_path):
    trace = tmp_path / "tw003.xplane.pb"
    shutil.copyfile(REAL_TRACE, trace)
    size = trace.stat().st_size
    line = one_error_line(audit_bounded(trace, JAXPLACE_MAX_TRACE_BYTES="1KiB"))
    assert f"{trace} is 107.5 KiB ({size:,} bytes), over the 1.0 KiB (1,024 bytes) limit" in line
    line = one_error_line(audit_bounded(trace, JAXPLACE_MAX_TRACE_DIR_BYTES=str(size - 1)))
    assert f"({size:,} bytes) together, over the" in line
    # a limit ProfileData could not honour, and one that is not a size
    line = one_error_line(audit_bounded(trace, JAXPLACE_MAX_TRACE_BYTES="3 GiB"))
    assert "JAXPLACE_MAX_TRACE_BYTES='3 GiB' is above 2,147,483,647 bytes" in line
    line = one_error_line(audit_bounded(trace, JAXPLACE_MAX_TRACE_BYTES="lots"))
    assert line.startswith("jaxplace: error: JAXPLACE_MAX_TRACE_BYTES='lots': not a size")
    # raised above the file: read as usual
    proc = cli("audit", trace, "--format", "json", env={"JAXPLACE_MAX_TRACE_BYTES": "1.5 GiB"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["source"] == "trace"


# ---------------------------------------------------------------------------- deep directories


def _make_deep(root: Path, levels: int) -> str:
    """root/d/d/.../d, ``levels`` deep, made one mkdir at a time (os.makedirs recurses)."""
    path = str(root)
    for _ in range(levels):
        path = os.path.join(path, "d")
        os.mkdir(path)
    return path


def _remove_deep(root: Path, levels: int) -> None:
    """Deepest first: shutil.rmtree (and pytest's tmp cleanup) recurse once per level."""
    paths = [str(root)]
    for _ in range(levels):
        paths.append(os.path.join(paths[-1], "d"))
    for p in reversed(paths[1:]):
        os.rmdir(p)


@pytest.fixture
def deep_tree(tmp_path):
    root = tmp_path / "deep"
    root.mkdir()
    _make_deep(root, 1200)
    yield root
    _remove_deep(root, 1200)


def test_a_log_dir_1200_levels_deep_is_one_line_exit_2(deep_tree):
    line = one_error_line(cli("audit", deep_tree))
    assert line == (f"jaxplace: error: {deep_tree} goes on more than {MAX_WALK_DEPTH} directory "
                    f"levels down without a .xplane.pb trace above that depth; jaxplace looks no "
                    "deeper. Pass the log dir that holds plugins/profile/, or the .xplane.pb file "
                    "itself")
    assert MAX_WALK_DEPTH == 64


def test_a_deep_branch_beside_a_real_log_dir_does_not_stop_the_audit(deep_tree):
    run = deep_tree / "plugins" / "profile" / "2025_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copyfile(REAL_TRACE, run / "tw003.xplane.pb")
    proc = cli("audit", deep_tree, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["trace"]["files"] == [str(run / "tw003.xplane.pb")]
    shutil.rmtree(deep_tree / "plugins")


def test_the_walk_stops_exactly_at_the_depth_limit(tmp_path):
    deepest = Path(_make_deep(tmp_path, 3))
    (deepest / "h.xplane.pb").write_bytes(b"x")  # 3 levels down: the walk looks at depth 3
    assert holds_trace(tmp_path, max_depth=3) is True
    with pytest.raises(TraceError, match="more than 2 directory levels"):
        holds_trace(tmp_path, max_depth=2)
    (deepest / "h.xplane.pb").unlink()
    assert holds_trace(tmp_path, max_depth=3) is False  # the whole tree seen, no trace
    os.symlink(tmp_path, deepest / "loop")  # symlinked dirs are not followed: no endless walk
    assert holds_trace(tmp_path) is False


# ---------------------------------------------------------------------------- huge core_details

FOUR_MIB = 4 * 2**20


@pytest.mark.parametrize("shape", sorted(xspace.HUGE_CORE_DETAILS))
def test_a_4_mib_tpu_trace_with_a_huge_core_details_stat_audits(tmp_path, shape):
    """Each shape reaches the decoder (bytes, valid UTF-8) and would take seconds to minutes
    there without its bounds: 10 bytes per varint, MAX_CORE_DETAILS per stat."""
    trace = tmp_path / "tpu.xplane.pb"
    trace.write_bytes(xspace.huge_core_details_trace(shape, FOUR_MIB))
    assert FOUR_MIB <= trace.stat().st_size < FOUR_MIB + 32
    proc = cli("audit", trace, "--format", "json")  # the 300 s test timeout guards a hang
    assert proc.returncode in (0, 2), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    if proc.returncode == 0:
        doc = json.loads(proc.stdout)
        assert doc["devices"] == ["tpu:0"]
        totals = doc["transfers"]["totals"]
        assert totals["h2d"] == {"count": 1, "bytes": 4096}
        assert totals["d2h"] == {"count": 1, "bytes": 1024}
        assert doc["ops"]["by_device"]["tpu:0"]["device_ns"] == 300 + 200
    else:
        assert len(proc.stderr.splitlines()) == 1


def test_varints_are_bounded_to_10_bytes():
    assert proto_varints(b"\x08" + b"\xff" * 9 + b"\x01") == {1: 2**64 - 1}  # 10 bytes: the most
    assert proto_varints(b"\x08" + b"\xff" * 10 + b"\x01") == {}  # 11: not a proto
    assert proto_varints("\x08" + "é" * 2000) == {}  # an endless varint, handed over as str
    assert proto_varints("\x10\x05" * (MAX_CORE_DETAILS // 2)) == {2: 5}  # at the size limit
    assert proto_varints("\x10\x05" * (MAX_CORE_DETAILS // 2) + "\x18\x01") == {}  # over it


def test_a_device_plane_with_an_odd_index_is_data_not_a_bug(tmp_path):
    """``/device:GPU:²``: ``"²".isdigit()`` is True but ``int("²")`` fails; such a plane is not a
    device plane jaxplace knows (issue 15 #10), never "not supported yet, please report it"."""
    trace = tmp_path / "odd.xplane.pb"
    names = {1: "MemcpyH2D"}
    stats = {1: "memcpy_details"}
    events = [xspace.event(1, 1000, 500, [xspace.stat(1, "size:4096 dest:0 async:1")])]
    trace.write_bytes(xspace.space([
        xspace.plane(1, "/device:GPU:\u00b2", [xspace.line(1, "Stream #1(MemcpyH2D)", events)], names, stats),
        xspace.plane(2, "/host:CPU", [], {}, {})]))
    proc = cli("audit", trace, "--format", "json")
    assert proc.returncode in (0, 2), proc.stderr
    assert "please report" not in proc.stderr and "Traceback" not in proc.stderr
