"""The user's call stack of every transfer (issue 28), interned once: a trie of user frames.

A node is one user frame under its parent node (0: the outermost user frame), keyed on
(parent, code object, instruction offset), so one id stands for one distinct user stack and a
transfer row carries its whole stack as one int (model/raw.py). Nodes are numbered here for
both hot paths: capture/_native.c's ``SiteCache.stack`` walks the frames and caches the keys,
and calls ``_intern_node`` on a miss, as it calls ``_intern_site`` for sites.
"""
from __future__ import annotations

import itertools
from collections import deque

from jaxplace_cli.model.events import StackNode, TransferEvent

# Frame tiers (capture/recorder.py): 2 = the user's code, 1 = a third-party library.
USER, LIBRARY = 2, 1
MAX_STACK = 128  # user frames a stack keeps, the innermost (capture/_native.c's MAX_STACK)
TRANSFER_FIELDS = len(TransferEvent._fields)  # a transfer row without its stack node
_TRANSFER_SITE = TransferEvent._fields.index("site")


class Stacks:
    """The stack half of ``Recorder`` (a mixin: it reads the recorder's tiers and sites)."""

    def _init_stacks(self, maxlen: int | None) -> None:
        self._nodes: dict = {}  # (parent node, id(code), offset) -> node
        self._node_ids = itertools.count(1)
        self.node_frame: dict = {}  # node -> (file, line, function) of its frame
        self._new_nodes: deque = deque(maxlen=maxlen)  # StackNode rows for the store

    def stack_of(self, frame) -> int:
        """Stack node of the user frames at or above ``frame``, outermost first; 0 for none. One
        node per distinct user stack, so a transfer carries its whole stack as one int; its
        leaf's site is the one ``site_of`` gives. A stack of one frame is 0 too: that frame is
        the row's site, which is all a transfer without a node has (analysis/stacks.py), so its
        ``TransferStack`` row would say nothing (P6: 34 of an iteration's 139 rows)."""
        tiers = self._tiers
        user = []
        f = frame
        while f is not None:
            code = f.f_code
            tier = tiers.get(id(code))
            if tier is None:
                tier = self._tier(code)
            if tier == USER and len(user) < MAX_STACK:
                user.append(f)
            f = f.f_back
        if len(user) < 2:
            return 0  # none, or one frame: the site alone (a library frame's where none is the user's)
        node = 0
        nodes = self._nodes
        for f in reversed(user):
            nid = nodes.get((node, id(f.f_code), f.f_lasti))
            node = nid if nid is not None else self._intern_node(node, f)
        return node

    def _intern_node(self, parent: int, f) -> int:
        """The node of frame ``f`` under ``parent`` (both paths number nodes here)."""
        code = f.f_code
        key = (parent, id(code), f.f_lasti)
        nid = self._nodes.get(key)
        if nid is None:
            nid = self._nodes[key] = next(self._node_ids)
            self._codes.append(code)  # keeps id(code) unique while it is a key
            where = self.node_frame[nid] = (code.co_filename, f.f_lineno, code.co_name)
            self._new_nodes.append(StackNode(nid, parent, *where))
        return nid

    def with_stack(self, ev, frame) -> tuple:
        """Transfer row ``ev`` with the stack node of ``frame``'s user frames appended (the raw
        row's last field), or 0 where that stack does not end at the row's site (a transfer
        attributed to another frame) or the lookup failed (counted, never raised)."""
        try:
            node = self.stack_of(frame)
            if node:
                site = self.site_info.get(ev[_TRANSFER_SITE])
                if site is None or self.node_frame.get(node) != tuple(site[1:]):
                    node = 0
        except Exception as exc:
            self.recording_failed(exc)
            node = 0
        return (*ev, node)
