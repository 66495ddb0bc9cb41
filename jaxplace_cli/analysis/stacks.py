"""Bytes by call stack (issue 28): the transfers of a run as a tree of the user's frames.

A pure function over a store reader. Every transfer names its stack (a ``StackNode`` of the
trie capture/stacks.py builds) or, in a run recorded before stacks and for a transfer without
one, only its site, which is then a stack of one frame. Frames are merged by file, line and
function along the path from the outermost user frame, so two instruction offsets on one line
are one box; each
frame holds the bytes and count per kind of every transfer made at or below it (inclusive, as
a flame graph's widths). The tree is bounded: past ``max_frames`` the smallest frames are
folded into one ``(N more)`` box under their parent, and ``folded`` says how many.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.store.stacks import stack_nodes, stack_totals

MAX_FRAMES = 400  # boxes drawn; the rest folded (a 1M-event run's report stays small)
MAX_DEPTH = 256  # a parent chain longer than the capture keeps (128) is a damaged store


@dataclass
class Frame:
    """One box: a user frame (``real``) under its parent, or the folded rest (not ``real``,
    ``folded`` frames). ``bytes``/``count``: per kind, of every transfer at or below it;
    ``self_bytes``/``self_count``: of those made in this frame itself (its leaf transfers);
    ``steady_bytes``/``steady_count``: as ``bytes``/``count``, in the steady-state steps."""

    real: bool
    file: str
    line: int
    function: str
    bytes: dict = field(default_factory=dict)
    count: dict = field(default_factory=dict)
    self_bytes: dict = field(default_factory=dict)
    self_count: dict = field(default_factory=dict)
    steady_bytes: dict = field(default_factory=dict)
    steady_count: dict = field(default_factory=dict)
    children: list = field(default_factory=list)
    folded: int = 0

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    @property
    def total_count(self) -> int:
        return sum(self.count.values())


@dataclass
class StackTree:
    """The tree: ``roots`` (outermost user frames, biggest first), the run's totals per kind,
    frames shown and frames folded; ``steady``: the steady-state steps' seq range and count
    (``steady_*`` of the frames), (0, 0, 0) when the run has no steps after warm-up."""

    roots: list
    bytes: dict
    count: dict
    frames: int
    folded: int
    steady: tuple = (0, 0, 0)

    def walk(self):
        """(depth, frame) in display order: depth first, children biggest first."""
        todo = [(0, f) for f in reversed(self.roots)]
        while todo:
            depth, f = todo.pop()
            yield depth, f
            todo.extend((depth + 1, c) for c in reversed(f.children))


def stack_path(node: int, site: tuple, nodes: dict, cache: dict) -> tuple:
    """(file, line, function) of each frame from the outermost down to ``node``'s; ``site``'s
    alone for no node. A node the trie lacks, a cycle or a chain past MAX_DEPTH (a damaged
    store) leaves what was walked."""
    if not node:
        return (site,)
    got = cache.get(node)
    if got is not None:
        return got
    out, n, seen = [], node, set()
    while n and n in nodes and n not in seen and len(out) < MAX_DEPTH:
        seen.add(n)
        s = nodes[n]
        out.append((s.file, s.line, s.function))
        n = s.parent
    path = tuple(reversed(out)) or (site,)
    cache[node] = path
    return path


def _add(d: dict, kind: str, n: int) -> None:
    d[kind] = d.get(kind, 0) + n


def steady_window(steps) -> tuple[int, int, int]:
    """(first seq, end seq, steps) of the steady-state steps of ``steps`` (an
    ``analysis.steps.StepInfo``: the steps after warm-up); (0, 0, 0) when there are none."""
    if steps is None or len(steps.steps) <= steps.warmup:
        return (0, 0, 0)
    steady = steps.steps[steps.warmup:]
    return (steady[0].start_seq, steady[-1].end_seq, len(steady))


def stack_tree(store, sites: dict, max_frames: int = MAX_FRAMES, steady: tuple = (0, 0, 0)) -> StackTree:
    """The run's transfers as a tree of user frames; ``sites``: id -> Site (the reader's);
    ``steady``: ``steady_window`` of the run's steps."""
    nodes, cache = stack_nodes(store), {}
    root = Frame(False, "", 0, "")
    index: dict = {}  # path -> Frame
    for t in stack_totals(store, steady[:2]):
        if t.kind not in TRANSFER_KINDS:
            continue
        s = sites.get(t.site)
        path = stack_path(t.node, (s.file, s.line, s.function) if s else ("?", 0, "?"), nodes, cache)
        parent = root
        for i in range(len(path)):
            f = index.get(path[:i + 1])
            if f is None:
                f = index[path[:i + 1]] = Frame(True, *path[i])
                parent.children.append(f)
            _add(f.bytes, t.kind, t.bytes)
            _add(f.count, t.kind, t.count)
            if t.steady_count:
                _add(f.steady_bytes, t.kind, t.steady_bytes)
                _add(f.steady_count, t.kind, t.steady_count)
            parent = f
        _add(parent.self_bytes, t.kind, t.bytes)
        _add(parent.self_count, t.kind, t.count)
        _add(root.bytes, t.kind, t.bytes)
        _add(root.count, t.kind, t.count)
    shown, folded = _bound(root, max_frames)
    return StackTree(root.children, root.bytes, root.count, shown, folded, steady)


def _order(f: Frame) -> tuple:
    return (-f.total, -f.total_count, f.file, f.line, f.function)


def _bound(root: Frame, max_frames: int) -> tuple[int, int]:
    """Keep the ``max_frames`` biggest frames whose parents are kept (biggest first from the
    roots); each parent's other children become one folded box. (shown, folded)."""
    keep: set = set()
    heap = [(_order(c), id(c), c) for c in root.children]
    heapq.heapify(heap)
    while heap and len(keep) < max_frames:
        _, _, f = heapq.heappop(heap)
        keep.add(id(f))
        for c in f.children:
            heapq.heappush(heap, (_order(c), id(c), c))
    folded = 0
    todo = [root]
    while todo:
        f = todo.pop()
        kept = sorted((c for c in f.children if id(c) in keep), key=_order)
        rest = [c for c in f.children if id(c) not in keep]
        if rest:
            other = Frame(False, "", 0, f"({_frames(rest)} more)", folded=_frames(rest))
            for c in rest:
                for k, v in c.bytes.items():
                    _add(other.bytes, k, v)
                    _add(other.self_bytes, k, v)
                for k, v in c.count.items():
                    _add(other.count, k, v)
                    _add(other.self_count, k, v)
                for k, v in c.steady_bytes.items():
                    _add(other.steady_bytes, k, v)
                for k, v in c.steady_count.items():
                    _add(other.steady_count, k, v)
            folded += other.folded
            kept.append(other)
        f.children = kept
        todo.extend(c for c in kept if c.real)
    return len(keep), folded


def _frames(frames: list) -> int:
    n, todo = 0, list(frames)
    while todo:
        f = todo.pop()
        n += 1
        todo.extend(f.children)
    return n
