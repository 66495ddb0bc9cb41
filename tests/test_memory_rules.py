"""The memory rules (issue 27: analysis/rules/memory.py) on blocks recorded in-process, each
with a clean twin that must stay silent, and on the sample scripts' clean twins."""
import json
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from conftest import cli
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from test_dogfood import CASES
from test_memory_capture import line as line_in
from test_memory_capture import recorded_memory

from jaxplace_cli.analysis.findings import RuleConfig
from jaxplace_cli.analysis.rules.memory import memory_growth, memory_imbalance, replicated

MEMORY_RULES = ("memory-growth", "replicated", "memory-imbalance")
KiB, MiB = 1 << 10, 1 << 20


def line(tag: str) -> int:
    return line_in(tag, Path(__file__))


def findings(m, rule):
    run = SimpleNamespace(store=m.store)
    return rule(run, RuleConfig())


def _steps(leak: bool):
    step = jax.jit(lambda v: v * 2)
    kept = []
    x = jnp.ones((256, 256))  # 256 KiB
    for _ in range(6):
        y = step(x)  # L-leak
        if leak:
            kept.append(y)
    return kept


def test_memory_growth_names_the_line_that_keeps_allocating(tmp_path):
    with recorded_memory(tmp_path) as m:
        kept = _steps(leak=True)
    (f,) = findings(m, memory_growth)
    assert (f.rule, f.severity, f.line, f.bytes, f.devices) == ("memory-growth", "warning", line("L-leak"),
                                                                256 * KiB, ["cpu:0"])
    # per step 256 KiB, and the count the increases between step ends that make up the total
    n = f.count
    assert f.message.startswith(f"live device memory on cpu:0 grew in each of {n} consecutive steady-state steps ")
    start, end = f.message.split("per step, ")[1].split(")")[0].split(" -> ")
    assert n >= 2 and abs(_kib(end) - _kib(start) - n * 256) < 64  # human_bytes rounds MiB to 0.1
    del kept


def test_memory_growth_clean_twin(tmp_path):
    with recorded_memory(tmp_path) as m:
        _steps(leak=False)
    assert findings(m, memory_growth) == []


def test_replicated_costs_the_extra_copies(tmp_path, jax_devices):
    mesh = Mesh(jax_devices, ("a",))
    with recorded_memory(tmp_path) as m:
        rep = jax.device_put(jnp.ones((512, 512)), NamedSharding(mesh, PartitionSpec()))  # L-rep: 1 MiB each
        split = jax.device_put(jnp.ones((512, 512)), NamedSharding(mesh, PartitionSpec("a")))
    (f,) = findings(m, replicated)
    assert (f.line, f.count, f.bytes, f.devices) == (line("L-rep"), 1, 3 * MiB, [f"cpu:{i}" for i in range(4)])
    del rep, split


def test_replicated_costs_the_copies_alive_at_once(tmp_path, jax_devices):
    # six generations of replicated 1 MiB parameters made at one line, each rebinding frees the
    # one before after the next is made: at most two alive at once, 2 x 3 MiB of extra copies
    # (a review saw every generation summed: 18 MiB)
    mesh = Mesh(jax_devices, ("a",))
    base = jnp.ones((512, 512))
    with recorded_memory(tmp_path) as m:
        rep = None
        for k in range(6):
            rep = jax.device_put(base * k, NamedSharding(mesh, PartitionSpec()))  # L-gen: 1 MiB each
    (f,) = findings(m, replicated)
    assert (f.line, f.count, f.bytes) == (line("L-gen"), 6, 2 * 3 * MiB)
    assert f.message.endswith("6.0 MiB of device memory in extra copies at most at once")
    del rep


def test_memory_imbalance_and_its_twin(tmp_path, jax_devices):
    d0, d1 = jax_devices[:2]
    with recorded_memory(tmp_path) as m:
        big = jnp.zeros((4096, 4096), device=d0)  # L-big: 64 MiB
        small = jnp.zeros((512, 512), device=d1)  # 1 MiB
    (f,) = findings(m, memory_imbalance)
    assert (f.line, f.bytes, f.devices) == (line("L-big"), 63 * MiB, ["cpu:0", "cpu:1"])
    del big, small
    (tmp_path / "twin").mkdir()
    with recorded_memory(tmp_path / "twin") as m:
        a = jnp.zeros((2048, 2048), device=d0)  # 16 MiB each
        b = jnp.zeros((2048, 2048), device=d1)
    assert findings(m, memory_imbalance) == []
    del a, b


CLEAN = sorted(case for case, (_s, _o, expected) in CASES.items() if not expected)


@pytest.mark.parametrize("case", CLEAN)
def test_clean_sample_scripts_have_no_memory_findings(case, sample_run):
    script, options, _ = CASES[case]
    rec = sample_run(script, *options[2:], devices=options[1])  # shared with test_dogfood
    proc = cli("audit", rec.run, "--format", "json")
    doc = json.loads(proc.stdout)
    assert "memory" in doc
    assert [f["message"] for f in doc["findings"] if f["rule"] in MEMORY_RULES] == []


def _kib(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"KiB": 1, "MiB": 1024}[unit]
