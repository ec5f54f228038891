"""Invariants of the reference trie and its match states (the same ones as
:mod:`ngramspec.engine.integrity`, stated on Python objects)."""

from __future__ import annotations

from ..errors import IntegrityError
from .trie import Node

__all__ = ["check_reference"]


def _fail(msg: str) -> None:
    raise IntegrityError(msg)


def check_reference(backend) -> None:
    """Check a :class:`~ngramspec.reference.backend.ReferenceBackend`."""
    trie = backend.trie
    root = trie.root
    exact = bool(getattr(backend.config, "exact_counts", False))  # freq may stay 0
    if root.parent is not None:
        _fail("the root has a parent")
    if not 1 <= trie.size <= trie.capacity:
        _fail(f"node count {trie.size} outside [1, capacity={trie.capacity}]")
    order = {node: k for k, node in enumerate(trie.global_lru)}
    if root in order:
        _fail("the root is in the global LRU list")
    reached = 0
    stack: list[tuple[Node, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > trie.max_depth:
            _fail(f"{node!r} is deeper than the trie depth {trie.max_depth}")
        if node.version < 1:
            _fail(f"{node!r} has version {node.version} < 1")
        if node is not root:
            reached += 1
            if node not in order:
                _fail(f"{node!r} is in the trie but not in the global LRU list")
            if node.freq < (0 if exact else 1):
                _fail(f"{node!r} has freq below {0 if exact else 1}")
        kids = list(node.children.values())
        if len(node.lru) != len(kids) or {id(c) for c in node.lru} != {id(c) for c in kids}:
            _fail(f"{node!r}: recency list and child map hold different children")
        for token, child in node.children.items():
            if child.token != token or child.parent is not node:
                _fail(f"{child!r} is filed under token {token} of {node!r} but says otherwise")
            if node is not root and order[node] > order[child]:
                _fail(f"global LRU: {node!r} is behind its child {child!r}")
        if node is not root and not exact and sum(c.freq for c in kids) > node.freq:
            _fail(f"{node!r}: freq below the sum of its children's freqs")
        positions = [order.get(c, -1) for c in node.lru]
        if positions != sorted(positions):
            _fail(f"children of {node!r}: recency list and global LRU disagree")
        stack.extend((c, depth + 1) for c in kids)
    if reached != len(order):
        _fail(f"global LRU list holds {len(order)} nodes, the trie {reached}")
    for key, state in getattr(backend, "states", {}).items():
        if len(state.anchors) > trie.max_depth:
            _fail(f"match state of {key!r} stores {len(state.anchors)} suffixes")
        if state.epoch > trie.epoch:
            _fail(f"match state of {key!r} is from a future epoch")
        for ref in state.anchors:
            if ref is None:
                continue
            node, version = ref
            if version > node.version:
                _fail(f"match state of {key!r} holds a version from the future")
            if state.epoch == trie.epoch and version == node.version and node not in order:
                _fail(f"match state of {key!r} holds a fresh reference to a node not in the trie")
