"""Bytes by call stack as a speedscope file (`jaxplace export RUN --speedscope FILE`, issue 28).

speedscope's own JSON format (https://www.speedscope.app/file-format-schema.json): frames
shared by every profile, and ``sampled`` profiles whose samples are stacks (frame indices,
outermost first) with weights. Here a sample is one frame of ``analysis.stacks.StackTree`` and
its weight the bytes transferred in that frame itself (its ``self_bytes``), so speedscope's
widths are the tree's inclusive bytes: one profile for every kind together, one per kind.
"""
from __future__ import annotations

import json

from jaxplace_cli.model.events import TRANSFER_KINDS

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def speedscope(trees: list, name: str, exporter: str) -> dict:
    """The speedscope document of ``trees``: ``(label, StackTree)`` per run (``Audit.
    stacks_by_process``: one for a run, label ""; a job's per process, ``p<i>``, each its own
    profiles over the shared frames); ``name``: the run's or job's."""
    frames: list = []
    index: dict = {}
    profiles: list = []
    for label, tree in trees:
        profiles += _profiles(tree, f"{label} · " if label else "", frames, index)
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": profiles,
            "name": f"{name}: bytes by call stack", "activeProfileIndex": 0, "exporter": exporter}


def _profiles(tree, prefix: str, frames: list, index: dict) -> list:
    samples: list = []  # (path of frame indices, {kind: self bytes})

    def frame_index(f) -> int:
        key = (f.file, f.line, f.function) if f.real else ("", 0, f.function)
        i = index.get(key)
        if i is None:
            i = index[key] = len(frames)
            frames.append({"name": f.function, "file": f.file, "line": f.line} if f.real
                          else {"name": f.function})
        return i

    path: list = []
    for depth, f in tree.walk():
        del path[depth:]
        path.append(frame_index(f))
        if any(f.self_bytes.values()):
            samples.append((list(path), f.self_bytes))
    return [_profile(f"{prefix}all transfers (bytes)", samples, None)] + \
        [_profile(f"{prefix}{k} (bytes)", samples, k) for k in TRANSFER_KINDS if tree.bytes.get(k)]


def _profile(name: str, samples: list, kind: str | None) -> dict:
    stacks, weights = [], []
    for path, by_kind in samples:
        w = sum(by_kind.values()) if kind is None else by_kind.get(kind, 0)
        if w:
            stacks.append(path)
            weights.append(w)
    return {"type": "sampled", "name": name, "unit": "bytes", "startValue": 0,
            "endValue": sum(weights), "samples": stacks, "weights": weights}


def render_speedscope(trees: list, name: str, exporter: str) -> str:
    return json.dumps(speedscope(trees, name, exporter), separators=(",", ":")) + "\n"
