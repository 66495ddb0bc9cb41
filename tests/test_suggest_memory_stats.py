"""``device.memory_stats()`` at step boundaries (issue 27 item 1): sampled as each
``jax.profiler.StepTraceAnnotation`` step ends, reported per step in the audit's
``memory.devices[].stats_by_step``. This suite runs on CPU, whose backend has no statistics
(``memory_stats()`` is None): there the recording is unchanged (no marker, no seq drawn, the
backend asked once); the per-step report is checked on the samples a GPU backend's sampler
writes (the same marker, written here by the recorder during real recorded steps)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import jax
import jax.numpy as jnp

from jaxplace_cli.analysis.memory import as_dict, memory_report
from jaxplace_cli.analysis.steps import detect_steps
from jaxplace_cli.capture.recorder import Recorder
from jaxplace_cli.capture.recording import Recording
from jaxplace_cli.model.events import MARKER_MEMORY_STATS
from jaxplace_cli.store.reader import StoreReader
from jaxplace_cli.store.writer import StoreWriter

KiB = 1 << 10


def _record(tmp_path, gpu_samples: bool, first: int = 0):
    """Three annotated steps (step_num ``first`` on), each making a 64 KiB array on cpu:0 that it
    keeps."""
    rec = Recorder()
    recording = Recording(rec, "all")
    recording.start()
    kept = []
    try:
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("train", step_num=first + i):
                kept.append(jnp.ones((128, 128), jnp.float32) + i)
                if gpu_samples:  # what sample_step_stats writes where the backend answers
                    rec.marker(MARKER_MEMORY_STATS, json.dumps({"cpu:0": [100 * (i + 1), 150 * (i + 1)]}))
    finally:
        recording.stop()
    rows = rec.drain()
    writer = StoreWriter(tmp_path / "events.sqlite")
    writer.write(rows)
    writer.close()
    run = SimpleNamespace(store=StoreReader(tmp_path / "events.sqlite"))
    return rec, rows, as_dict(memory_report(run, detect_steps(run)))


def test_cpu_has_no_statistics_and_nothing_changes(tmp_path):
    rec, rows, doc = _record(tmp_path, gpu_samples=False)
    kinds = [m[2] for m in rows["markers"]]
    assert MARKER_MEMORY_STATS not in kinds
    assert kinds.count("step-begin") == kinds.count("step-end") == 3
    assert rec.memory.no_stats  # asked at the first step's end, never again
    assert doc["source"] == "tracked"
    (dev,) = [d for d in doc["devices"] if d["device"] == "cpu:0"]
    assert "stats_by_step" not in dev and "memory_stats" not in dev
    assert dev["end_bytes"] >= 3 * 64 * KiB


def test_samples_taken_inside_steps_are_reported_per_step(tmp_path):
    _, _, doc = _record(tmp_path, gpu_samples=True)
    assert doc["source"] == "tracked+memory_stats"
    (dev,) = [d for d in doc["devices"] if d["device"] == "cpu:0"]
    assert dev["stats_by_step"] == [{"step": i, "bytes_in_use": 100 * (i + 1), "peak_bytes_in_use": 150 * (i + 1)}
                                    for i in range(3)]
    assert dev["memory_stats"] == {"bytes_in_use": 300, "peak_bytes_in_use": 450}  # the last sample


def test_steps_are_named_by_the_scripts_step_num(tmp_path):
    """Steps numbered 100, 101, 102 by the script: the peak (every step keeps its array, so the
    last step's) and each sample are named by those numbers, as the budget and the trace window
    name them, not by their position."""
    _, _, doc = _record(tmp_path, gpu_samples=True, first=100)
    (dev,) = [d for d in doc["devices"] if d["device"] == "cpu:0"]
    assert dev["peak_step"] == 102
    assert [s["step"] for s in dev["stats_by_step"]] == [100, 101, 102]
