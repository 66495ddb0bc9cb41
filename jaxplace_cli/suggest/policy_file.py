"""Write a placement as a rules file (docs/policies.md, ``version = 1``).

Rules match stable keys only — the user's ``file:line`` (relative to the run's working
directory), the op name and, where one site's calls go to different devices, the call's
``occurrence`` — never addresses or buffer ids, so the file applies to a fresh run of the same
script. To keep it short and readable:
- ``[default]`` names the device that receives most ops; only the others need rules;
- a site's op names that go to one device share one rule (no ``occurrence``); calls that sit
  where their data is, on several devices, are one ``device = "jax"`` rule (suggest.groups);
- consecutive lines of one file whose ops all go to one device share one ``site`` range rule;
- occurrence rules (the most specific, and only where pins split a group) come first.
Output is a pure function of the placement: same input, same bytes.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np

from jaxplace_cli.model.safe import comment
from jaxplace_cli.suggest.from_run import RunGraph

_GLOB = str.maketrans({"[": "[[]", "*": "[*]", "?": "[?]"})


def _q(text: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML escapes)."""
    return json.dumps(text, ensure_ascii=True)


def _pattern(text: str) -> str:
    """Rules match with globs: escape the glob characters of a literal name."""
    return text.translate(_GLOB)


JAX = -1  # a shown device: the rule leaves the op to JAX, which runs it where its data is


def policy_rules(rg: RunGraph, assign: np.ndarray, follow: np.ndarray | None = None) -> tuple[str, list[dict]]:
    """``(default device, rules)``, the shorter of two exact ways to write ``assign``: by op
    family (one rule per device other than the default, listing the op names that go
    there — valid when every op name goes to one device) or by site (below). Both place
    every placeable op exactly where ``assign`` does; a one-device answer is ``[default]``.
    ``follow``: calls written as ``device = "jax"`` (they sit where their data is:
    suggest.groups)."""
    shown = np.asarray(assign, dtype=np.int64).copy()
    if follow is not None:
        shown[np.asarray(follow, dtype=bool)] = JAX
    names = list(rg.graph.devices)

    def name(d: int) -> str:
        return "jax" if d == JAX else names[d]

    by_site = _site_rules(rg, shown, name)
    by_op = _op_rules(rg, shown, by_site[0], name)
    return by_op if by_op is not None and len(by_op[1]) <= len(by_site[1]) else by_site


def _op_rules(rg: RunGraph, shown: np.ndarray, default: str, name):
    where: dict = defaultdict(set)
    for v, nd in enumerate(rg.nodes):
        if nd.placeable:
            where[nd.name].add(int(shown[v]))
    if any(len(d) > 1 for d in where.values()):
        return None
    ops: dict = defaultdict(list)
    for op, d in sorted(where.items()):
        if name(next(iter(d))) != default:
            ops[next(iter(d))].append(_pattern(op))
    return default, [{"op": o, "device": name(d)} for d, o in sorted(ops.items())]


def _site_rules(rg: RunGraph, a: np.ndarray, name) -> tuple[str, list[dict]]:
    """``(default device, rules)``; each rule a dict of matchers plus ``device``."""
    placeable = [v for v, nd in enumerate(rg.nodes) if nd.placeable]
    counts = Counter(int(a[v]) for v in placeable if a[v] != JAX)
    default = min(counts, key=lambda d: (-counts[d], d)) if counts else 0
    calls: dict = defaultdict(list)  # (file, line) -> [(name, occurrence, device, function, backward)]
    for v in placeable:
        nd = rg.nodes[v]
        calls[(nd.file, nd.line)].append((nd.name, nd.occurrence, int(a[v]), nd.function, nd.backward))
    occurrences, per_site, by_file = [], defaultdict(list), defaultdict(list)
    for (file, line), rows in sorted(calls.items()):
        per_key: dict = defaultdict(set)  # (name, backward) -> devices
        for op, _, d, _, bw in rows:
            per_key[(op, bw)].add(d)
        line_devs = set().union(*per_key.values())
        if len(line_devs) == 1:  # every op on this line goes to one device: range candidate
            by_file[file].append((line, sorted({op for op, _ in per_key}), line_devs.pop()))
            continue
        by_file[file].append((line, [], None))  # a barrier: ranges must not span this line
        functions = {f for _, _, _, f, _ in rows}
        site = f"{_pattern(file)}:{line}"
        for op, bw in sorted(per_key):
            devs = per_key[(op, bw)]
            # a rule names the pass only where the op's forward and backward calls differ
            other = per_key.get((op, not bw))
            pas = ("backward" if bw else "forward") if other is not None and other != devs else None
            if len(devs) == 1:  # one rule per (site, device, pass), listing its op names
                d = next(iter(devs))
                if d != default:
                    per_site[(site, d, pas)].append(_pattern(op))
                continue
            for _n, occ, d, func, _bw in sorted(r for r in rows if r[0] == op and r[4] == bw):
                if d == default:
                    continue
                rule = {"site": site, "op": [_pattern(op)], "occurrence": occ}
                if len(functions) > 1:  # two functions share the line: name which one
                    rule["function"] = _pattern(func)
                rule["device"] = name(d)
                occurrences.append(rule)
    # rules naming a pass first: a pass-less rule of the same site would match both passes
    specific = [{"site": site, "op": ops, **({"pass": pas} if pas else {}), "device": name(d)}
                for (site, d, pas), ops in sorted(per_site.items(), key=lambda kv: kv[0][2] is None)]
    ranges = []
    for file in sorted(by_file):
        run: list = []
        for item in sorted(by_file[file], key=lambda t: t[0]) + [None]:
            if run and (item is None or item[2] != run[0][2]):
                ranges += _range_rule(file, run, name, default)
                run = []
            if item is not None and item[2] is not None:
                run.append(item)
    # occurrence rules first (the most specific), then per-site rules, then line ranges
    return name(default), occurrences + specific + ranges


def _range_rule(file, run, name, default) -> list[dict]:
    """Consecutive lines (with ops) whose every op goes to one device: one rule."""
    dev = run[0][2]
    if dev == default:
        return []
    first, last = run[0][0], run[-1][0]
    names = sorted({n for _, ns, _ in run for n in ns})
    site = f"{_pattern(file)}:{first}" if first == last else f"{_pattern(file)}:{first}-{last}"
    return [{"site": site, "op": [_pattern(n) for n in names], "device": name(dev)}]


def render_policy(default: str, rules: list[dict], header: list[str]) -> str:
    # the header quotes the run (its argv in the `verify:` line): each entry stays one comment
    # line, so a newline in an argument cannot end the comment and add rules to the file
    lines = [f"# {comment(h)}" if h else "#" for h in header]
    lines += ["version = 1", ""]
    for r in rules:
        if r.get("why"):
            lines.append(f"# {r['why']}")
        lines.append("[[rule]]")
        for key in ("site", "function", "op", "pass", "occurrence", "device"):
            if key not in r:
                continue
            val = r[key]
            if isinstance(val, list):
                lines.append(f"{key} = [{', '.join(_q(x) for x in val)}]")
            elif isinstance(val, int):
                lines.append(f"{key} = {val}")
            else:
                lines.append(f"{key} = {_q(val)}")
        lines.append("")
    lines += ["# every op no rule names" + (" (all of them: one device moves nothing between devices)"
                                            if not rules else ""), "[default]", f"device = {_q(default)}", ""]
    return "\n".join(lines)
