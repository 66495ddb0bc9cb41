"""`jaxplace suggest --graph`: the published placement-graph format (copies under
tests/data/placement_graphs, see SOURCES.md there) and the solvers on real DNN graphs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_suggest_run import cli

from jaxplace_cli.suggest.coarsen import color_groups
from jaxplace_cli.suggest.from_json import GraphFileError, load_graph_json
from jaxplace_cli.suggest.milp import solve_milp
from jaxplace_cli.suggest.mincut import two_devices
from jaxplace_cli.suggest.model import TOTAL, TRANSFERS, partition_problem
from jaxplace_cli.suggest.pipeline import pipeline_loads, solve_throughput
from jaxplace_cli.suggest.solve import solve_graph

DATA = Path(__file__).resolve().parent / "data" / "placement_graphs"
BERT_INF = DATA / "bert24_inference_throughput.json"
BERT_TRAIN = DATA / "bert24_training_throughput.json"
GNMT = DATA / "gnmt_inference_latency.json"


def test_reads_the_published_format():
    g = load_graph_json(BERT_INF)
    assert g.n == 32 and g.m == 55
    assert g.devices == ("acc:0", "acc:1", "acc:2", "acc:3", "acc:4", "acc:5", "cpu:0")
    assert (g.src < g.dst).all()  # renumbered into a topological order
    node3 = g.names.index("node3")
    assert g.unary[node3, 0] == 696_000 and g.unary[node3, 6] == 6_960_000  # 0.696 / 6.96 ms in ns
    assert g.unary[:, 0].sum() == 92_406_000  # sum of fpgaLatency: 92.406 ms
    e = int(np.flatnonzero((g.src == node3) & (g.dst == g.names.index("node5")))[0])
    assert g.nbytes[e] == 4_194_304 and g.comm[e] == 1953  # size; cost 0.001953125 ms
    assert list(g.mem_cap[:6]) == [17185374208] * 6


def test_training_graph_colour_classes_pair_forward_and_backward():
    g = load_graph_json(BERT_TRAIN, include_cpu=False)
    assert g.n == 64 and int(color_groups(g.color).max()) + 1 == 32
    sol = solve_graph(g, TOTAL, balance=0.2)
    for c in np.unique(g.color):
        assert len(set(sol.assign[g.color == c].tolist())) == 1


def test_bad_graph_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GraphFileError, match="not readable JSON"):
        load_graph_json(bad)
    bad.write_text(json.dumps({"nodes": [{"id": 1}], "edges": [{"sourceId": 1, "destId": 9}]}))
    with pytest.raises(GraphFileError, match="malformed"):
        load_graph_json(bad)


def test_two_device_total_cost_min_cut_equals_milp_on_a_real_graph():
    g = load_graph_json(GNMT, accelerators=1)  # acc:0 + cpu:0: Stone's two-processor problem
    rng = np.random.default_rng(0)
    pinned = rng.choice(g.n, 10, replace=False)  # a few operators the accelerator cannot run
    g.allowed[pinned, 0] = False
    g.mem_cap = None  # a min cut cannot express memory caps
    p = partition_problem(g, TOTAL)
    assert two_devices(p).cost == solve_milp(p).cost


def test_throughput_dp_equals_every_contiguous_split():
    g = load_graph_json(BERT_INF, include_cpu=False, accelerators=2)
    sol = solve_throughput(g)
    best = min(int(pipeline_loads(g, np.where(np.arange(g.n) < s, 0, 1)).max()) for s in range(g.n + 1))
    assert sol.cost == best


def test_cli_graph_json_output(tmp_path, capsys):
    out = tmp_path / "placement.json"
    code, stdout, err = cli(capsys, "suggest", "--graph", BERT_INF, "--objective", "throughput", "--no-cpu",
                            "--format", "json", "-o", out)
    assert code == 0, err
    doc = json.loads(stdout)
    # the exact DP over ideals (issue 19); an optimality claim names its model
    assert doc["solver"] == "ideal-dp" and doc["optimal"] and "ideals" in doc["model"]
    assert sorted(doc["devices"]) == [f"acc:{i}" for i in range(6)]
    assert sum(len(v) for v in doc["devices"].values()) == 32
    assert json.loads(out.read_text()) == doc


def test_cli_graph_text_output(capsys):
    code, out, err = cli(capsys, "suggest", "--graph", GNMT, "--objective", "makespan")
    assert code == 0, err
    assert "solver: heft+local-search" in out and "acc:0" in out and "cpu:0" in out


def test_cli_graph_usage_errors(tmp_path, capsys):
    code, _, err = cli(capsys, "suggest", "--graph", tmp_path / "missing.json")
    assert code == 2 and "does not exist" in err
    code, _, err = cli(capsys, "suggest", "--graph", BERT_INF, "--objective", "fastest")
    assert code == 2 and "--objective" in err
    code, _, err = cli(capsys, "suggest")
    assert code == 2 and "nothing to suggest" in err


def test_transfers_with_balance_on_a_real_graph_is_optimal_when_small():
    g = load_graph_json(BERT_INF, include_cpu=False, accelerators=2)
    sol = solve_graph(g, TRANSFERS, balance=0.1)
    assert sol.solver == "milp" and sol.optimal
    p = partition_problem(g, TRANSFERS, 0.1)
    loads = np.bincount(sol.assign, weights=p.load, minlength=2)
    assert loads.max() <= p.load_cap
