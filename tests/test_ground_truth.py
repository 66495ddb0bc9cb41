"""Issue 2's ground truths A and B, end to end: `jaxplace run` + `jaxplace audit --format json`.

Every expected number is computed by hand from the script (see the comments), not by the tool.
"""
from conftest import SCRIPTS, audit_json, jaxplace, sites_by_line

MiB = 1024 * 1024


def test_ground_truth_a_pingpong_chain(tmp_path):
    run_dir = tmp_path / "run"
    proc = jaxplace("run", "--devices", "2", "--out", run_dir, "--no-trace", SCRIPTS / "ground_truth_a.py")
    assert proc.returncode == 0, proc.stderr
    r = audit_json(run_dir)
    t = r["transfers"]["totals"]
    # h2d: device_put(x, d0) of a (1024, 256) float32 array = 1024*256*4 bytes.
    assert t["h2d"] == {"count": 1, "bytes": 1024 * 256 * 4}
    # d2d: 1 (a -> d1) + 4 iterations x 2 (b -> d0, result -> d1) = 9 transfers of 1 MiB.
    assert t["d2d"] == {"count": 9, "bytes": 9 * MiB} == {"count": 9, "bytes": 9_437_184}
    # d2h: np.asarray(b) once, 1 MiB, blocking.
    assert t["d2h"] == {"count": 1, "bytes": MiB}
    h2d, d2d, d2h = (sites_by_line(r, k) for k in ("h2d", "d2d", "d2h"))
    assert set(h2d) == {7} and set(d2d) == {8, 10} and set(d2h) == {11}
    assert d2d[8]["count"] == 1 and d2d[10]["count"] == 8 and d2d[10]["bytes"] == 8 * MiB
    (read,) = d2h[11]["sites"]
    assert read["blocking"] is True and read["implicit"] is False and read["api"] == "np.asarray()"
    assert all(not s["implicit"] for s in r["transfers"]["sites"])
    # the `* 2` is a Python scalar operand: a 4-byte h2d, counted apart from real traffic
    assert r["transfers"]["small"]["h2d"] == {"count": 4, "bytes": 16}
    # ops: 1 + 1 + 4 x 2 device_puts and 4 multiplies
    assert r["ops"]["total"] == 14
    assert r["ops"]["by_device"]["cpu:0"]["count"] == 9  # 5 device_put to d0 + 4 multiply
    assert r["ops"]["by_device"]["cpu:1"]["count"] == 5
    # the chain 0 -> 1 -> 0 -> 1 ... returns to a visited device on every leg after the first
    (pp,) = [f for f in r["findings"] if f["rule"] == "pingpong"]
    assert pp["severity"] == "error" and pp["count"] == 8 and pp["bytes"] == 8 * MiB
    assert pp["line"] == 10
    # the line `jaxplace run` prints after the run says the same totals
    # every transfer counted (the 4 scalar operands too), as a budget counts them
    assert ("recorded 14 ops, transfers: h2d 5 (1.0 MiB; 4 under 1 KiB), d2h 1 (1.0 MiB), d2d 9 (9.0 MiB)"
            in proc.stderr), proc.stderr


def test_ground_truth_b_numpy_batches_and_item(tmp_path):
    run_dir = tmp_path / "run"
    proc = jaxplace("run", "--devices", "2", "--out", run_dir, "--no-trace", SCRIPTS / "ground_truth_b.py")
    assert proc.returncode == 0, proc.stderr
    r = audit_json(run_dir)
    t = r["transfers"]["totals"]
    # w: 128*128*4 = 65,536 B; 30 batches of 32*128*4 = 16,384 B
    assert t["h2d"] == {"count": 31, "bytes": 65_536 + 30 * 16_384} == {"count": 31, "bytes": 557_056}
    h2d = sites_by_line(r, "h2d")
    assert h2d[7]["count"] == 1 and h2d[7]["bytes"] == 65_536
    (call,) = h2d[11]["sites"]
    assert call["count"] == 30 and call["implicit"] is True and call["bytes"] == 30 * 16_384
    # .item() reads a float32 scalar: 4 bytes, below the 1 KiB threshold -> counted in `small`
    assert t["d2h"] == {"count": 0, "bytes": 0}
    assert r["transfers"]["small"]["d2h"] == {"count": 30, "bytes": 120}
    r0 = audit_json(run_dir, "--min-bytes", "0")
    (item,) = sites_by_line(r0, "d2h")[12]["sites"]
    assert item == {**item, "count": 30, "bytes": 120, "blocking": True, "implicit": False, "api": ".item()"}
    rules = {f["rule"]: f for f in r["findings"]}
    assert rules["implicit-h2d-in-loop"]["line"] == 11 and rules["implicit-h2d-in-loop"]["count"] == 30
    assert rules["host-sync-in-loop"]["line"] == 12 and rules["host-sync-in-loop"]["count"] == 30
    assert r["ops"]["by_device"]["cpu:0"]["top"][0] == {"name": "jit(<lambda>)", "count": 30}


def test_scalar_uploads_follow_x64_enabled_by_the_script(tmp_path):
    run_dir = tmp_path / "run"
    proc = jaxplace("run", "--out", run_dir, "--no-trace", SCRIPTS / "x64_scalars.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "float64 20.0\n"
    r = audit_json(run_dir, "--min-bytes", "0")
    # 2.0 (float64) and 3 (int64): 8 bytes each; True: a bool is 1 byte either way; and the
    # fill value of jnp.ones(4), float64 (JAX's transfer guard logs these 4 legs: issue 24)
    assert r["transfers"]["totals"]["h2d"] == {"count": 4, "bytes": 8 + 8 + 8 + 1}
