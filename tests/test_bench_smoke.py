"""The performance bench (bench/run_bench.py, `make bench`) at tiny sizes, so it cannot rot.

No timing assertions (timing is noisy; the real figures come from `make bench`): the bench must
finish, print every P-row with its measured value, target and verdict, and write a JSON file
with the keys bench/README.md documents. Every workload and every reference mode runs once.
"""
import json
import os
import subprocess
import sys
import time

from conftest import REPO, child_env

ROW_IDS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11", "P12")


def test_bench_smoke_prints_every_row_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "run_bench.py"), "--smoke", "--json", str(out)],
                          cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout
    for pid in ROW_IDS:
        assert any(line.startswith(pid + " ") and ("PASS" in line or "FAIL" in line)
                   for line in table.splitlines()), f"no {pid} row with a verdict in:\n{table}"
    assert "jax.profiler.trace" in table and "forced slow path" in table and "transfer_guard=log" in table

    doc = json.loads(out.read_text())
    assert doc["schema"] == 1 and doc["profile"] == "smoke"
    for key in ("date", "elapsed_s", "sizes", "machine", "git", "rows", "groups", "errors"):
        assert key in doc, key
    assert [r["id"] for r in doc["rows"]] == list(ROW_IDS)
    # what other processes used meanwhile (bench/box.py), for the run and each group
    assert doc["box"]["others_cpu_s"] is not None and "other processes on this box" in table
    assert all(g["box"]["others_cpu_s"] is not None for g in doc["groups"].values()), doc["groups"].keys()
    for r in doc["rows"]:
        assert set(r) >= {"id", "what", "target", "measured", "value", "pass", "note"}
        assert r["measured"] and r["target"]
    groups = doc["groups"]
    assert set(groups) >= {"P1", "P2", "P3", "P4", "P5", "P7", "P8", "P9", "P10", "P11"}
    # the workloads and their reference modes ran (a broken workload script shows up here)
    for pid in ("P1", "P2"):
        assert groups[pid]["configs"]["plain"]["ok"] == 1, groups[pid]["configs"]["plain"]
        assert groups[pid]["median_wall_ratio"] is not None
    p2 = {s["config"]: s for s in groups["P2"]["settings"]}
    for config in ("jaxplace", "jax.profiler.trace", "transfer_guard=log", "forced slow path",
                   "jaxplace (python path)"):
        assert p2[config]["runs"] == 1, (config, doc["errors"])
    # the event-count check of P6 compares the script's own counters with the store's rows
    checks = groups["P3"]["checks"]
    assert checks and all(c["events_in_store"] is not None and c["events_expected"] > 0 for c in checks)
    assert groups["P4"]["events"] == checks[0]["events_in_store"]
    # the pure-Python capture path ran at the long length, and lost nothing either
    assert [c["lost"] for c in checks if c["length"] == "long python path"] == [0], checks
    # P8: the longer run was recorded (every event stored) and audited
    p8 = groups["P8"]
    assert p8["error"] == "" and p8["median_wall_s"] is not None, p8
    assert p8["backpressure"]["lost_rows"] == 0 and p8["events"] > 6000, p8
    assert groups["P5"]["ref_median_wall_s"] is not None  # ProfileData.from_file reference ran
    # every 4 MiB core_details shape was audited (exit 0 or 2, no traceback)
    assert groups["P7"]["error"] == "" and groups["P7"]["median_wall_s"] is not None, groups["P7"]
    assert all(s["bytes"] >= 4 * 2**20 for k, s in groups["P7"]["shapes"].items() if "baseline" not in k)
    assert groups["P9"]["file_mb"] > 0, groups["P9"]  # the HTML report of the long run was written
    # P10: both ping-pong runs recorded and audited; by hand, n bounces of one array are n/2
    # returns of its first leg back (d1 -> d0 -> d1 ...: every move but the first returns)
    p10 = groups["P10"]["runs"]
    assert [r["bounces"] for r in p10] == [200, 800] and all(r["rss_mb"] for r in p10), p10
    assert [r["pingpong_round_trips"] for r in p10] == [199, 799], p10
    # P11: the same 2-process job by hand and under jaxplace launch, both ran
    assert groups["P11"]["median_wall_ratio"] is not None, groups["P11"]["errors"]


def test_accel_check_reads_memory_markers_from_the_store_when_the_audit_cannot(tmp_path):
    """bench/accel_check.py on a machine whose Python cannot run the audit (no typer on the lent
    TPU machine): the steps run's memory_stats markers and buffer/free counts come from its
    events.sqlite. A store made by hand: two markers, three buffers, two frees."""
    import sqlite3

    sys.path.insert(0, str(REPO / "bench"))
    try:
        import accel_check
    finally:
        sys.path.remove(str(REPO / "bench"))
    con = sqlite3.connect(tmp_path / "events.sqlite")
    con.executescript("""
        CREATE TABLE markers (seq INTEGER, ts_ns INTEGER, kind TEXT, value TEXT);
        CREATE TABLE buffers (buf INTEGER, seq INTEGER);
        CREATE TABLE frees (buf INTEGER, seq INTEGER, how TEXT);
        INSERT INTO markers VALUES (9, 0, 'memory_stats', '{"tpu:0": [200, 300]}'),
                                   (4, 0, 'memory_stats', '{"tpu:0": [100, 150]}'),
                                   (5, 0, 'step-end', 'train');
        INSERT INTO buffers VALUES (1, 1), (2, 2), (3, 3);
        INSERT INTO frees VALUES (1, 6, 'gc'), (2, 8, 'gc');
    """)
    con.commit()
    con.close()
    assert accel_check.stored_memory(tmp_path) == {"in_use_by_step": [{"tpu:0": 100}, {"tpu:0": 200}],
                                                   "buffers": 3, "frees": 2}
    assert accel_check.stored_memory(tmp_path / "nowhere") is None


def test_box_counts_the_cpu_of_other_processes_and_not_the_benchs_own(tmp_path):
    """bench/box.py: a busy process that is not the bench's (an orphan, as a stray job would be)
    is counted between two snapshots; a busy child of the bench is not. No timing assertion:
    the test waits until each has used CPU, then reads who is named."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import box
    finally:
        sys.path.remove(str(REPO / "bench"))
    stop = tmp_path / "stop"
    busy = "import os, sys\nwhile not os.path.exists(sys.argv[1]): pass"
    started = subprocess.run(["sh", "-c", '("$0" -c "$1" "$2" >/dev/null 2>&1 & echo $!)', sys.executable, busy, str(stop)],
                             capture_output=True, text=True, check=True)
    other = int(started.stdout)  # its parent shell has exited: reparented, not ours
    ours = None
    try:
        before = box.snapshot()
        assert before is not None and not any(pid == os.getpid() for pid, _ in before)
        ticks0 = [v for (pid, _), v in before.items() if pid == other]
        assert ticks0, "the other process is in the first snapshot"
        ours = subprocess.Popen([sys.executable, "-c", busy, str(stop)])
        for _ in range(1200):  # until each has used 3 clock ticks since (a wait, not a timing assertion)
            o, u = box._stat(str(other)), box._stat(str(ours.pid))
            if o and u and o[2] - ticks0[0] >= 3 and u[2] >= 3:
                break
            time.sleep(0.05)
        after = box.snapshot()
    finally:
        stop.touch()
        if ours is not None:
            ours.wait(timeout=60)
    # the other process is counted, the bench's child is not (which processes are named among
    # the busiest depends on what else the box ran meanwhile: checked apart, below)
    (key,) = [k for k in after if k[0] == other]
    assert not any(pid == ours.pid for pid, _ in after), after
    acc = box.account(before, after, 1.0)
    other_s = (after[key] - before[key]) / os.sysconf("SC_CLK_TCK")
    assert acc["others_cpu_s"] >= round(other_s, 2) >= 0.03, (acc, other_s)
    assert abs(acc["others_cores"] - acc["others_cpu_s"]) < 0.01  # over 1.0 s of wall
    assert box.account(None, after, 1.0)["others_cpu_s"] is None
    # the three busiest others by name, busiest first
    tick = os.sysconf("SC_CLK_TCK")
    named = box.account({(1, 0): 0, (2, 0): 0, (3, 0): 0, (4, 0): 0},
                        {(1, 0): 2 * tick, (2, 0): 5 * tick, (3, 0): tick, (4, 0): 3 * tick}, 2.0)
    assert [t["pid"] for t in named["top"]] == [2, 4, 1] and named["others_cpu_s"] == 11.0


def test_the_guard_parser_counts_what_each_device_received():
    """The guard logs a NamedSharding leg with the array's global aval; each device receives
    its shard (lines as JAX 0.10 logs them: a float32[8,4] put on a 2x2 mesh four ways, 4 legs
    each). By hand: P('x') 4 x 64 B, P(('x','y')) 4 x 32, P('x','y') 4 x 32, P(None,'y') 4 x 64,
    P() 4 x 128: 20 legs, 1,280 B (the global aval alone: 20 x 128 = 2,560 B)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import accel_check
    finally:
        sys.path.remove(str(REPO / "bench"))
    head = ("W1206 20:37:12.074811   12014 guard_lib.cc:125] host-to-device transfer: aval=ShapedArray("
            "float32[8,4]), dst_sharding=NamedSharding(mesh=Mesh('x': 2, 'y': 2, axis_types=(Auto, Auto)), spec=P(")
    specs = ["'x',", "('x', 'y'),", "'x', 'y'", "None, 'y'", ""]
    lines = [f"{head}{spec}), memory_kind=device)" for spec in specs for _ in range(4)]
    assert accel_check.guard_legs(lines)["h2d"] == [20, 1280, 0]
