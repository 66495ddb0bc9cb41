"""Placements written per (site, op name) group (suggest/groups.py, issue 19): a suggestion
never needs one rule per call unless the script's own pins split a group."""
from __future__ import annotations

import numpy as np

from jaxplace_cli.suggest.from_run import OpNode, RunGraph
from jaxplace_cli.suggest.groups import follows_data, solve_by_group, split_groups, tie
from jaxplace_cli.suggest.model import TOTAL, Graph, Solution
from jaxplace_cli.suggest.policy_file import policy_rules
from jaxplace_cli.suggest.solve import solve_graph


def _graph(n, k, src=(), dst=(), nbytes=None, unary=None, allowed=None, color=None):
    src, dst = np.array(src, np.int64), np.array(dst, np.int64)
    nb = np.array(nbytes if nbytes is not None else [1] * len(src), np.int64)
    return Graph(tuple(f"cpu:{i}" for i in range(k)), src, dst, nb, nb, src.copy(),
                 np.array(unary if unary is not None else [[10] * k] * n, np.int64),
                 np.array(allowed if allowed is not None else [[True] * k] * n, bool), np.zeros(n, np.int64),
                 None if color is None else np.array(color, np.int64))


def _nodes(keys):
    """OpNodes from (line, name, placeable)."""
    occ: dict = {}
    out = []
    for seq, (line, name, placeable) in enumerate(keys):
        o = occ.get((line, name), 0)
        occ[(line, name)] = o + 1
        out.append(OpNode(seq, "jnp" if placeable else "device_put", name, 1, "train.py", line, "main",
                          o if placeable else -1, placeable))
    return out


def test_follows_and_split_by_hand():
    # puts 0 (cpu:0) and 1 (cpu:1); op 2 reads 0, op 3 reads 1, op 4 reads 0 and 1
    g = _graph(5, 2, src=[0, 1, 0, 1], dst=[2, 3, 4, 4])
    a = np.array([0, 1, 0, 1, 0])
    assert follows_data(g, a).tolist() == [False, False, True, True, False]  # 4 reads one array from cpu:1
    group = np.array([-1, -1, 7, 7, 8])
    assert split_groups(group, a).tolist() == [7]
    assert split_groups(group, np.array([0, 1, 0, 0, 0])).size == 0


def test_tie_joins_a_group_unless_its_pins_differ():
    # 0 pinned to cpu:0 and 1 pinned to cpu:1; 2 shares a class with 0, 3 with 1 (their data
    # follows them); 2, 3 and 4 are one group: 4 joins 2's class, 3 cannot (cpu:1 vs cpu:0)
    allowed = [[True, False], [False, True], [True, True], [True, True], [True, True]]
    g = _graph(5, 2, allowed=allowed, color=[0, 1, 0, 1, -1])
    color, left_out = tie(g, np.array([-1, -1, 5, 5, 5]), {5})
    assert left_out == 1
    assert color[0] == color[2] == color[4] >= 0 and color[1] == color[3] >= 0 and color[1] != color[0]


def test_a_balanced_answer_keeps_each_group_on_one_device():
    """Four ops of 10, 0 -> 2 and 1 -> 3 carrying 100 each, two groups {0, 1} (line 1) and
    {2, 3} (line 2), two devices whose load may not exceed the average (balance 0). Alone,
    the solver splits both groups (0, 2 | 1, 3: cost 40, nothing crosses). Group {2, 3}
    follows its data there, but {0, 1} reads nothing and is split: tied, it takes one
    device, so {2, 3} takes the other (balance) and both edges cross: 40 + 200."""
    g = _graph(4, 2, src=[0, 1], dst=[2, 3], nbytes=[100, 100])
    first = solve_graph(g, TOTAL, balance=0.0)
    assert first.cost == 40 and first.assign[0] != first.assign[1]
    keys = _nodes([(1, "sin", True), (1, "sin", True), (2, "cos", True), (2, "cos", True)])
    rg = RunGraph(g, keys, [], np.zeros(4, np.int64))
    sol, follow = solve_by_group(g, rg.groups(), lambda gg: solve_graph(gg, TOTAL, balance=0.0))
    a = sol.assign
    assert a[0] == a[1] and a[2] == a[3] and a[0] != a[2] and not follow.any()
    assert sol.cost == 240 and "share one device" in sol.model
    default, rules = policy_rules(rg, a, follow)
    assert len(rules) == 1 and rules[0]["device"] != default


def test_calls_that_follow_their_data_are_one_jax_rule():
    """By-hand data parallelism: puts to cpu:0, cpu:1, cpu:2 (pinned, heavy arrays), then
    the same op at one site reads each. Tying the site would move two of the arrays; the
    calls sit where their data is, so one ``device = "jax"`` rule says it."""
    allowed = [[True, False, False], [False, True, False], [False, False, True]] + [[True] * 3] * 3
    g = _graph(6, 3, src=[0, 1, 2], dst=[3, 4, 5], nbytes=[1000] * 3, allowed=allowed)
    keys = _nodes([(5, "device_put", False)] * 3 + [(6, "jit(step)", True)] * 3)
    rg = RunGraph(g, keys, [], np.array([0, 1, 2, 0, 1, 2]))
    sol, follow = solve_by_group(g, rg.groups(), lambda gg: solve_graph(gg, "transfers", hint=rg.recorded))
    assert sol.assign.tolist() == [0, 1, 2, 0, 1, 2] and sol.cost == 0
    assert follow.tolist() == [False] * 3 + [True] * 3
    default, rules = policy_rules(rg, sol.assign, follow)
    assert rules == [{"op": ["jit(step)"], "device": "jax"}]


def test_one_rule_per_site_and_device():
    """Line 3's sin and cos go to cpu:1 (one rule naming both), its exp stays on the default;
    line 4's sin too, so no rule by op name alone can say it."""
    g = _graph(5, 2)
    keys = _nodes([(3, "sin", True), (3, "cos", True), (3, "exp", True), (4, "sin", True), (5, "exp", True)])
    rg = RunGraph(g, keys, [], np.zeros(5, np.int64))
    default, rules = policy_rules(rg, np.array([1, 1, 0, 0, 0]))
    assert default == "cpu:0"
    assert rules == [{"site": "train.py:3", "op": ["cos", "sin"], "device": "cpu:1"}]


def test_forward_and_backward_calls_of_a_site_are_told_apart_by_pass():
    """Line 3: mul's forward calls stay on the default, its backward calls go to cpu:1, add
    goes to cpu:1 too. The rule naming the pass comes first: a pass-less rule listing mul
    would also take its forward calls."""
    g = _graph(4, 2)
    keys = _nodes([(3, "mul", True), (3, "mul", True), (3, "add", True), (4, "sin", True)])
    keys[1].backward = True
    rg = RunGraph(g, keys, [], np.zeros(4, np.int64))
    assert rg.groups().tolist() == [0, 1, 2, 3]
    default, rules = policy_rules(rg, np.array([0, 1, 1, 0]))
    assert default == "cpu:0"
    assert rules == [{"site": "train.py:3", "op": ["mul"], "pass": "backward", "device": "cpu:1"},
                     {"site": "train.py:3", "op": ["add"], "device": "cpu:1"}]


def test_a_solver_that_splits_one_new_group_each_time_still_gets_no_split_answer():
    """Eight groups of two calls that read nothing; a (heuristic) solver that keeps colour
    classes together but splits the first group not yet tied — a new one every round, as a
    balanced answer on measured op times can. Tying one group a round would run out of
    rounds and leave occurrence rules; the last round ties them all."""
    groups = 8
    g = _graph(2 * groups, 2)
    keys = _nodes([(line, "sin", True) for line in range(groups) for _ in range(2)])
    rg = RunGraph(g, keys, [], np.zeros(2 * groups, np.int64))
    group = rg.groups()
    assert len(set(group.tolist())) == groups

    def solve(gg):
        a = np.zeros(gg.n, np.int64)
        loose = [v for v in range(gg.n) if gg.color[v] < 0]
        if loose:  # the lowest untied group: its second call on cpu:1
            a[[v for v in loose if group[v] == group[loose[0]]][1]] = 1
        return Solution(a, 0, "splitter")

    sol, follow = solve_by_group(g, group, solve)
    assert split_groups(group, sol.assign).size == 0 and not follow.any()
    assert "occurrence" not in str(policy_rules(rg, sol.assign, follow))
