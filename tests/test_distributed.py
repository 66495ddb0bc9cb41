"""jax.distributed jobs (issue 17): ``jaxplace launch``, one store per process, the merged audit.

Real subprocesses on CPU: ``jaxplace launch -n 2 --devices-per-process 2`` runs
tests/scripts/distributed/spmd_step.py — written for a cluster (``jax.distributed.initialize()``
without arguments), gloo CPU collectives, a jitted step over a global mesh of both processes'
devices, a host batch per step. Two launches in all (~10 s each on the shared 2-core box).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import jsonschema
import pytest
from conftest import REPO, SCRIPTS, audit_json, child_env, cli, jaxplace

SCRIPT = SCRIPTS / "distributed" / "spmd_step.py"
N, L = 2, 2  # processes, devices per process
STEPS = 4
ROWS_PER_DEVICE, COLS = 4, 128  # spmd_step.py
PUT_BYTES = ROWS_PER_DEVICE * COLS * 4  # one device_put of y's rows for one device: 2,048 B
# the x batch of a step through make_array_from_process_local_data: one upload to the process's
# devices (a group endpoint), ROWS_PER_DEVICE x L rows x COLS float32 = 4,096 B
BATCH_BYTES = ROWS_PER_DEVICE * L * COLS * 4


def _launch(out, *args, timeout=180):
    return jaxplace("launch", "-n", N, "--devices-per-process", L, "--out", out, SCRIPT, *args,
                    timeout=timeout)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist") / "job"
    proc = _launch(out, "--steps", STEPS)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out, proc


def test_launch_records_each_process_and_the_audit_merges_them(job):
    """Expected per process, by hand from spmd_step.py and what this branch records:

    * h2d: STEPS x L ``jax.device_put`` of y's rows, ROWS_PER_DEVICE x COLS float32 = 2,048 B
      each: 8 transfers, 16,384 B (all >= 1 KiB, so counted);
    * d2h: one ``float(loss)`` of a float32 scalar: 4 B, below --min-bytes (small);
    * ops: STEPS ``jit(step)`` + one ``jit(init)`` + STEPS x L ``device_put`` = 13.

    * h2d also: STEPS x one ``jax.make_array_from_process_local_data`` upload of the x batch to
      the process's L devices, one leg per device (the unit JAX's transfer guard counts: L
      host-to-device lines per upload; issue 24), BATCH_BYTES = 4,096 B each: 8 legs,
      16,384 B — per process 16 legs, 32,768 B.

    The job's totals are the two processes' sums: h2d 32 legs, 65,536 B; d2h small 2, 8 B.
    """
    out, proc = job
    # every line of the processes' output comes back prefixed with its process
    assert "[p0] process 0 of 2: loss" in proc.stdout and "[p1] process 1 of 2: loss" in proc.stdout
    assert f"jaxplace audit {out}" in proc.stderr
    launched = json.loads((out / "job.json").read_text())
    assert launched["status"] == "complete" and launched["exit_code"] == 0
    assert [p["exit_code"] for p in launched["processes"]] == [0, 0]

    r = audit_json(out)
    jsonschema.validate(r, json.loads((REPO / "docs" / "audit-json-schema.json").read_text()))
    d = r["distributed"]
    assert d["process_count"] == N and d["launcher"] == "jaxplace launch"
    assert d["coordinator"] == launched["coordinator"] and d["coordinator"].startswith("127.0.0.1:")
    procs = {p["index"]: p for p in d["processes"]}
    assert sorted(procs) == [0, 1]
    # 4 unique devices, L per process, none shared, the same as the audit's device list
    owned = [dev for p in procs.values() for dev in p["devices"]]
    assert len(owned) == N * L == len(set(owned)) and all(len(p["devices"]) == L for p in procs.values())
    assert sorted(r["devices"]) == sorted(owned)
    assert {w["device"]: w["process"] for w in d["devices"]} == {
        dev: i for i, p in procs.items() for dev in p["devices"]}

    per_h2d = {"count": STEPS * L + STEPS * L, "bytes": STEPS * L * PUT_BYTES + STEPS * BATCH_BYTES}
    assert per_h2d == {"count": 16, "bytes": 32_768}
    for i, p in procs.items():
        assert p["status"] == "complete" and p["died"] is None, p
        assert p["transfers"]["totals"]["h2d"] == per_h2d, (i, p["transfers"])
        assert p["transfers"]["totals"]["d2h"] == {"count": 0, "bytes": 0}
        assert p["transfers"]["small"]["d2h"] == {"count": 1, "bytes": 4}
        # STEPS jit(step) + 1 init + STEPS x L device_put + STEPS make_array_from_process_local_data
        # + STEPS make_array_from_single_device_arrays (JAX's inner call, recorded as an op too)
        assert p["ops"]["total"] == STEPS + 1 + STEPS * L + 2 * STEPS == 21
        assert p["steps"] == STEPS
    t = r["transfers"]
    assert t["totals"]["h2d"] == {"count": 2 * 16, "bytes": 2 * 32_768}
    assert t["totals"]["h2d"] == {k: sum(p["transfers"]["totals"]["h2d"][k] for p in procs.values())
                                  for k in ("count", "bytes")}
    assert t["small"]["d2h"] == {"count": 2, "bytes": 8}
    assert r["ops"]["total"] == 2 * 21
    # a jit call over the global mesh runs on its own process's devices
    for p in procs.values():
        group = r["ops"]["by_device"][",".join(p["devices"])]
        # jit(step) x STEPS, the init, and the two make_array_* calls of each step's batch
        assert group["count"] == STEPS + 1 + 2 * STEPS and {"name": "jit(step)", "count": STEPS} in group["top"]
        for dev in p["devices"]:
            assert r["ops"]["by_device"][dev]["count"] == STEPS  # its device_put calls
    spanning = {(c["name"], c["process"]): c["count"] for c in d["spanning_calls"]}
    assert spanning[("jit(step)", 0)] == spanning[("jit(step)", 1)] == STEPS
    assert r["findings"] == []  # a clean SPMD job: nothing to warn about
    for i in range(N):
        m = json.loads((out / f"proc-{i}" / "run.json").read_text())["distributed"]
        assert (m["process_index"], m["process_count"], m["initialized"]) == (i, N, True)
        assert m["coordinator"] == launched["coordinator"] and m["source"] == "jaxplace launch"


def test_text_audit_shows_every_process(job):
    out, _ = job
    proc = cli("audit", out, "--format", "text", env={"COLUMNS": "200"})  # each process's row on one line
    assert proc.returncode == 0, proc.stderr
    assert "Processes (2 of 2; jaxplace launch" in proc.stdout
    # each process's transfers, small ones included as in the merged totals: its one 4-byte
    # float(loss) read (d2h) and its 16 uploads, 32,768 B (test above, by hand)
    table = proc.stdout.split("Processes (2 of 2", 1)[1].split("Work per device", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"^\W*p[01]\b", line)]
    assert len(rows) == 2 and all("16 · 32.0" in r and "1 · 4 B" in r for r in rows), table
    assert "Work per device" in proc.stdout and "jit(step): calls over 4 devices" in proc.stdout


def test_budget_per_process_and_in_total(job, tmp_path):
    """[h2d] count = 16 holds in each process (16 legs each); [total.h2d] count = 31 does not (32)."""
    out, _ = job
    budget = tmp_path / "b.toml"
    budget.write_text("[h2d]\ncount = 16\n[total.h2d]\ncount = 31\n")
    proc = cli("audit", out, "--budget", budget, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    breaches = json.loads(proc.stdout)["budget"]["breaches"]
    assert [(b["rule"], b["limit"], b["actual"]) for b in breaches] == [("total.h2d.count", 31, 32)]
    budget.write_text("[h2d]\ncount = 15\n")
    proc = cli("audit", out, "--budget", budget, "--format", "json")
    assert proc.returncode == 1
    breaches = json.loads(proc.stdout)["budget"]["breaches"]
    assert sorted(b["message"][:3] for b in breaches) == ["p0:", "p1:"]
    assert {(b["rule"], b["actual"]) for b in breaches} == {("h2d.count", 16)}


def test_diff_of_two_jobs(job):
    out, _ = job
    proc = cli("diff", out, out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    kinds = json.loads(proc.stdout)["kinds"]
    assert kinds["h2d"]["base"] == kinds["h2d"]["new"] == {"count": 32, "bytes": 65_536}  # legs


def test_killed_process_stops_the_job_and_both_stores_audit(tmp_path):
    """Process 1 is SIGKILLed while it waits after step 2 and process 0 is in step 3, blocked in
    an all-reduce that needs process 1. launch must stop process 0 and exit with process 1's
    code (128 + SIGKILL); process 0 saves its run although its main thread never returns to
    Python (the stop watcher); the audit names process 1. Without launch stopping it, process
    0 stays blocked (measured: over 30 s; JAX's heartbeat timeout is 100 s)."""
    out, flag = tmp_path / "job", tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "launch", "-n", str(N),
                             "--devices-per-process", str(L), "--out", str(out), str(SCRIPT),
                             "--steps", "6", "--wait-file", str(flag)],
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 150
        files = [tmp_path / f"ready.{i}" for i in range(N)]
        while not all(f.exists() for f in files):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        time.sleep(1.0)  # process 0 goes on into step 3 and blocks in its all-reduce
        os.kill(int(files[1].read_text()), signal.SIGKILL)
        killed = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
        stopped_after = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, stderr[-3000:]
    # generous for a loaded box; the failure this guards against is a hang of minutes
    assert stopped_after < 30, stopped_after
    assert "process 1 failed first (killed by SIGKILL)" in stderr
    launched = json.loads((out / "job.json").read_text())
    assert launched["first_failure"] == {"index": 1, "exit_code": 137}
    ends = {p["index"]: p for p in launched["processes"]}
    assert ends[1]["signal"] == "SIGKILL" and not ends[1]["stopped_by_launch"]
    assert ends[0]["stopped_by_launch"]

    for i in range(N):  # each store audits on its own
        alone = audit_json(out / f"proc-{i}")
        assert alone["transfers"]["totals"]["h2d"]["count"] >= 2 * L  # steps 0 and 1 at least
    # process 0 saved its run: on the SIGINT (KeyboardInterrupt when gloo gives up on the dead
    # peer and the wait returns to Python) or, still blocked, from the stop watcher
    m0 = json.loads((out / "proc-0" / "run.json").read_text())
    assert m0["status"] == "interrupted", m0
    assert m0["error"] == "KeyboardInterrupt" or m0["error"].startswith("stopped by jaxplace launch")
    r = audit_json(out)
    procs = {p["index"]: p for p in r["distributed"]["processes"]}
    assert procs[1]["died"] == "killed by SIGKILL" and procs[0]["died"] is None
    died = [f for f in r["findings"] if f["rule"] == "process-died"]
    assert len(died) == 1 and died[0]["message"].startswith("process 1 died first: killed by SIGKILL")
    assert died[0]["severity"] == "error"
    # process 1 waited after step 2: its first 2 steps' uploads are in its store
    # (the batch of each step: L legs, one per device, as the guard counts)
    assert procs[1]["transfers"]["totals"]["h2d"] == {"count": 2 * L + 2 * L,
                                                      "bytes": 2 * L * PUT_BYTES + 2 * BATCH_BYTES}


def test_detect_process_from_launcher_environments():
    from jaxplace_cli.capture.distributed import detect_process

    assert detect_process({}) is None
    assert detect_process({"JAXPLACE_PROCESS_INDEX": "0", "JAXPLACE_PROCESS_COUNT": "1"}) is None
    p = detect_process({"JAXPLACE_PROCESS_INDEX": "3", "JAXPLACE_PROCESS_COUNT": "4",
                        "JAXPLACE_LAUNCH_COORDINATOR": "127.0.0.1:5"})
    assert (p.index, p.count, p.source, p.coordinator) == (3, 4, "jaxplace launch", "127.0.0.1:5")
    slurm = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}
    p = detect_process(slurm)
    assert (p.index, p.count, p.source, p.job_id) == (1, 2, "SLURM", "77.0")
    assert detect_process({k: v for k, v in slurm.items() if k != "SLURM_STEP_ID"}) is None  # sbatch script
    p = detect_process({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"})
    assert (p.index, p.count, p.source) == (2, 4, "Open MPI")
    p = detect_process({"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "a,b,c,d"})
    assert (p.index, p.count) == (1, 4)
    assert detect_process({"PMI_RANK": "5", "PMI_SIZE": "4"}) is None  # not a valid index


# -- the job rules on views built by hand (the fields the launch tests above check come from runs)

def _proc(index, ops=100, h2d=(0, 0), h2d_step=0.0, steps=10, died="", ended="exit 0"):
    from jaxplace_cli.analysis.distributed import ProcessView
    from jaxplace_cli.analysis.summary import KindTotal

    v = ProcessView(index, f"job/proc-{index}", ops=ops, steps=steps, died=died, ended=ended,
                    devices=[f"cpu:{2048 * index}", f"cpu:{2048 * index + 1}"])
    v.totals = {"h2d": KindTotal(*h2d), "d2h": KindTotal(), "d2d": KindTotal()}
    v.step_medians = {"h2d": {"count": 1, "bytes": h2d_step}}
    v.result = object()  # its run was readable
    return v


def _findings(*procs, **kw):
    from jaxplace_cli.analysis.distributed import JobView
    from jaxplace_cli.analysis.findings import RuleConfig
    from jaxplace_cli.analysis.rules.distributed import job_findings

    view = JobView("job", kw.pop("count", len(procs)), list(procs), **kw)
    return [(f.rule, f.message, f.count, f.bytes) for f in job_findings(view, RuleConfig())]


def test_job_rules_stay_quiet_on_a_balanced_job():
    assert _findings(_proc(0, h2d=(40, 163_840), h2d_step=16_384),
                     _proc(1, h2d=(40, 163_840), h2d_step=16_384)) == []


def test_process_idle_under_a_tenth_of_the_busiest():
    hits = _findings(_proc(0, ops=100), _proc(1, ops=9))
    assert [(r, c) for r, _, c, _ in hits] == [("process-idle", 9)]
    assert "process 1 dispatched 9 ops while process 0 dispatched 100" in hits[0][1]
    assert _findings(_proc(0, ops=100), _proc(1, ops=10)) == []  # a tenth is not under it
    assert _findings(_proc(0, ops=9), _proc(1, ops=0)) == []  # the busiest did under 10


def test_single_process_io():
    hits = _findings(_proc(0, h2d=(12, 49_152), h2d_step=4096), _proc(1))
    assert [(r, c, b) for r, _, c, b in hits] == [("single-process-io", 12, 49_152)]
    assert "process 0 did all 12 host->device transfers of the job (48.0 KiB)" in hits[0][1]
    assert _findings(_proc(0, h2d=(2, 8192)), _proc(1)) == []  # fewer than loop_threshold (3)


def test_unequal_step_transfers():
    hits = _findings(_proc(0, h2d=(10, 40_960), h2d_step=4096), _proc(1, h2d=(10, 81_920), h2d_step=8192))
    assert [(r, b) for r, _, _, b in hits] == [("unequal-step-transfers", 4096)]
    assert "(p0 4.0 KiB, p1 8.0 KiB;" in hits[0][1]
    assert _findings(_proc(0, h2d=(10, 1), h2d_step=4096), _proc(1, h2d=(10, 1), h2d_step=6144)) == []  # x1.5
    assert _findings(_proc(0, h2d=(10, 1), h2d_step=100), _proc(1, h2d=(10, 1), h2d_step=900)) == []  # < 1 KiB


def test_process_died_names_the_first_and_the_stopped():
    hits = _findings(_proc(0, ended="exit 130 after launch stopped it", ops=3),
                     _proc(1, died="killed by SIGKILL", ended="killed by SIGKILL"),
                     first_failure=1, count=3, missing=[2])
    assert [r for r, *_ in hits] == ["process-died", "process-died"]  # the survivor is not idle: it was stopped
    assert hits[0][1].startswith("process 1 died first: killed by SIGKILL; launch stopped the others "
                                 "(p0: exit 130 after launch stopped it)")
    assert hits[1][1].startswith("1 of the job's 3 processes recorded nothing (no proc-<i>/ for process 2)")


def test_a_process_stuck_outside_python_is_saved_by_the_stop_watcher(tmp_path):
    """Process 0's main thread never acts on launch's SIGINT (it blocks SIGINT and sleeps, as a
    main thread blocked in a collective would be); process 1 then exits 3. The watcher thread
    must save process 0's run (status interrupted, the reason in error) and exit 130 before
    launch's grace runs out (otherwise SIGKILL leaves the manifest at 'running')."""
    out = tmp_path / "job"
    proc = jaxplace("launch", "-n", 2, "--grace", 20, "--trace", "off", "--out", out,
                    SCRIPTS / "distributed" / "stuck.py", tmp_path / "blocked", timeout=120)
    assert proc.returncode == 3, proc.stderr[-3000:]
    ends = {p["index"]: p for p in json.loads((out / "job.json").read_text())["processes"]}
    assert (ends[1]["exit_code"], ends[1]["stopped_by_launch"]) == (3, False)
    assert (ends[0]["exit_code"], ends[0]["signal"], ends[0]["stopped_by_launch"]) == (130, None, True)
    m0 = json.loads((out / "proc-0" / "run.json").read_text())
    assert m0["status"] == "interrupted" and m0["exit_code"] == 130
    assert m0["error"] == ("stopped by jaxplace launch (process 1 failed first: exit 3) while the "
                           "script was blocked in JAX")
    r = audit_json(out)
    assert [f["message"].split(":")[0] for f in r["findings"]] == ["process 1 died first"]


def test_launch_of_one_process_keeps_the_job_layout(tmp_path):
    out = tmp_path / "job"
    proc = jaxplace("launch", "-n", 1, "--trace", "off", "--out", out, SCRIPTS / "exit_code.py", 0)
    assert proc.returncode == 0, proc.stderr
    assert (out / "proc-0" / "run.json").is_file() and (out / "job.json").is_file()


def test_ctrl_c_reaches_every_process_once_and_each_saves_its_run(tmp_path):
    """SIGINT to launch (a Ctrl-C at the terminal reaches launch alone: the processes run in
    groups of their own) is sent on to each process group; each run ends as python would on a
    Ctrl-C (status interrupted, exit 130, its atexit handlers run) and launch exits 130."""
    out = tmp_path / "job"
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "launch", "-n", "2", "--trace", "off",
                             "--out", str(out), str(SCRIPTS / "sleeps.py"), "--atexit"],
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = 0
        for line in proc.stdout:  # "[p0] ready", "[p1] ready"
            ready += line.rstrip().endswith("] ready")
            if ready == 2:
                break
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert ready == 2 and proc.returncode == 130, stderr[-3000:]
    launched = json.loads((out / "job.json").read_text())
    assert launched["signals"] == ["SIGINT"] and launched["status"] == "interrupted"
    for i in range(2):
        m = json.loads((out / f"proc-{i}" / "run.json").read_text())
        assert (m["status"], m["exit_code"]) == ("interrupted", 130)
    assert stderr.count("KeyboardInterrupt") >= 2  # python's traceback, from each process
    # the script's atexit handler (0.5 s) ran to its end in each, as under python: it was cut
    # 0.1 s after the run was saved (capture/distributed.py watch_launch)
    assert stdout.count("atexit done") == 2, stdout


def test_a_followed_child_is_not_a_process_of_the_job(tmp_path):
    """`jaxplace run --follow-children` in process 0 of a 2-process job (the job's variables in
    its environment, as launch or srun set them): the parent records into OUT/proc-0/, and its
    `python -c` child, which inherits those variables, into OUT/proc-0/children/<pid>/ as a
    plain child run (no `distributed` section, no proc-0/ of its own). By hand: ones, sum = 2
    ops; the fill value of ones = 1 h2d (the guard logs it: issue 24); float() = 1 d2h."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys\n"
        "import jax.numpy as jnp\n"
        "print(float(jnp.ones(3).sum()))\n"
        "subprocess.run([sys.executable, '-c', 'import jax.numpy as jnp; print(float(jnp.ones(2).sum()))'], check=True)\n")
    out = tmp_path / "job"
    env = child_env()
    env.update(JAXPLACE_PROCESS_INDEX="0", JAXPLACE_PROCESS_COUNT="2", JAXPLACE_JOB_ID="followed")
    proc = jaxplace("run", "-q", "--no-trace", "--follow-children", "--out", out, script, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["3.0", "2.0"]
    parent = json.loads((out / "proc-0" / "run.json").read_text())
    assert parent["distributed"]["process_index"] == 0
    (child_dir,) = (out / "proc-0" / "children").iterdir()
    assert not (child_dir / "proc-0").exists()
    child = json.loads((child_dir / "run.json").read_text())
    assert child.get("distributed") is None and child["status"] == "complete"
    assert (child["events"]["ops"], child["events"]["transfers"]) == (2, 2)
