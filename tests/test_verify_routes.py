"""Issue 24 item 7: ``suggest --verify`` predicts where the host legs go under the new placement.

A host value fed to an op the policy moves is still uploaded once, but to the op's new device;
a value the host reads is still read once, but from the device its producer now runs on. The
prediction carries those legs' count and bytes over from the measurement and moves their
device end (``Traffic.routes``); ``--verify`` compares the routes too.

The sample: an eager chain recorded under ``rr-strict`` on 2 devices, where every op alternates
devices. By hand: ``jnp.ones`` runs on cpu:0 (its fill value, 4 B, uploaded there), the three
``x * 2`` on cpu:1 (the 2, 4 B each, uploaded there), the three ``jnp.sin`` on cpu:0 and
``x.sum()`` on cpu:1, whose 4 B result ``float`` reads. The suggestion puts the whole chain on one
device, so all four uploads and the read move there.
"""
from __future__ import annotations

import pytest
from conftest import cli, jaxplace

CHAIN = """\
import jax.numpy as jnp

x = jnp.ones((256, 256))
for _ in range(3):
    x = x * 2
    x = jnp.sin(x)
print(float(x.sum()))
"""


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    d = tmp_path_factory.mktemp("routes")
    (d / "chain.py").write_text(CHAIN)
    proc = jaxplace("run", "--devices", 2, "--policy", "rr-strict", "--no-trace", "--quiet", "--out", d / "run",
                    "chain.py", cwd=d)
    assert proc.returncode == 0, proc.stderr
    return d


def test_prediction_moves_the_host_legs_with_their_ops(chain):
    from jaxplace_cli.analysis.run import open_run
    from jaxplace_cli.suggest.plan import make_plan

    plan = make_plan(open_run(chain / "run"))
    assert plan.measured.routes == {("h2d", "host>cpu:0"): [1, 4], ("h2d", "host>cpu:1"): [3, 12],
                                    ("d2h", "cpu:1>host"): [1, 4]}
    assert plan.baseline.routes == plan.measured.routes  # the model of the recorded placement
    (dev,) = {plan.rg.graph.devices[int(d)] for d in plan.solution.assign}  # one device for the chain
    moved = {("h2d", f"host>{dev}"): [4, 16], ("d2h", f"{dev}>host"): [1, 4]}
    assert plan.predicted.routes == moved
    assert plan.expected.routes == moved
    # counts and bytes per site are the measurement's: the policy changes only the device end
    assert {k: v for k, v in plan.expected.sites.items() if k[0] != "d2d"} == {
        ("h2d", "chain.py:3"): [1, 4], ("h2d", "chain.py:5"): [3, 12], ("d2h", "chain.py:7"): [1, 4]}


def test_verify_compares_the_routes_of_the_replay(chain, tmp_path):
    proc = cli("suggest", chain / "run", "-o", tmp_path / "p.toml", "--verify", "chain.py",
               "--verify-out", tmp_path / "replay", cwd=chain)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if ">" in line and line.strip().endswith("ok")]
    routes = {(r[0], r[1]): " ".join(r[2:-1]) for r in rows}
    dev = "cpu:0" if ("h2d", "host>cpu:0") in routes else "cpu:1"
    assert routes == {("h2d", f"host>{dev}"): "4 (16 B) 4 (16 B)", ("d2h", f"{dev}>host"): "1 (4 B) 1 (4 B)"}
    assert "result: transfers match the prediction exactly" in proc.stdout
