"""Draft-tree builders (BFS by recency, PROB by frequency) and SGLang's output layout.

A draft tree is a list of nodes; node 0 is the root (the last context token) and each node maps
a child token to its tree index in a libstdc++-ordered map, because that order is the order in
which ``fill_result`` lays siblings out.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ..stdorder import StdPriorityQueue, UnorderedMapOrder
from .trie import Node

__all__ = ["build_bfs", "build_prob", "fill_result", "level_order", "BreadthSchedule"]

Tree = list[UnorderedMapOrder]


class BreadthSchedule(NamedTuple):
    """How the BFS breadth (a double) starts below an anchor and shrinks level by level.

    Below an anchor of length ``d`` the breadth starts at ``(top - d) * scale + min_breadth``
    and drops by ``scale = (max_breadth - min_breadth) / steps`` per level; each level uses
    ``max(1, trunc(breadth))`` children.  The two SGLang eras differ only in ``top`` and
    ``steps`` (see the two constructors).
    """

    top: int
    steps: int
    min_breadth: int
    max_breadth: int

    @classmethod
    def sglang_0523(cls, max_depth: int, min_breadth: int, max_breadth: int) -> "BreadthSchedule":
        """0.5.23: anchors are trie depths; ``top = steps = max(1, max_depth - 1)``."""
        mmd = max(1, max_depth - 1)
        return cls(mmd, mmd, min_breadth, max_breadth)

    @classmethod
    def sglang_059(cls, min_window: int, max_window: int, min_breadth: int,
                   max_breadth: int) -> "BreadthSchedule":
        """0.5.9: anchors are match windows; ``top = max_window``,
        ``steps = max_window - min_window + 1`` (so the start never quite reaches the max)."""
        return cls(max_window, max_window - min_window + 1, min_breadth, max_breadth)

    @property
    def scale(self) -> float:
        return float(self.max_breadth - self.min_breadth) / self.steps

    def start(self, d: int) -> float:
        """Breadth (a double) at which BFS starts below an anchor of length ``d``."""
        return float(self.top - d) * self.scale + float(self.min_breadth)


def build_bfs(anchors: Sequence[tuple[Node, int]], budget: int,
              schedule: BreadthSchedule, *,
              to_int: Callable[[float], int] = int) -> tuple[Tree, int]:
    """Expand every anchor breadth-first by recency into one shared tree of ``budget`` nodes.

    ``anchors`` are ``(node, length)`` pairs, longest first.  Returns the tree and the number
    of drafted nodes.  ``to_int``: how a level's breadth (a double) becomes a count (C++'s
    conversion truncates; a test may plant another).
    """
    scale = schedule.scale
    tree: Tree = [UnorderedMapOrder() for _ in range(budget + 1)]
    cursor = 1
    for anchor, d in anchors:
        queue = deque([(0, schedule.start(d), anchor)])
        while queue and cursor <= budget:
            parent, breadth_f, node = queue.popleft()
            breadth = max(1, to_int(breadth_f))  # C++ double -> int truncates toward zero
            for i, child in enumerate(node.lru):
                if i >= breadth or cursor > budget:
                    break
                pos = tree[parent].get(child.token)
                if pos is None:
                    pos = cursor
                    tree[parent][child.token] = cursor
                    cursor += 1
                # The next level steps down from the double, not from the truncated value.
                queue.append((pos, breadth_f - scale, child))
    return tree, cursor - 1


def build_prob(anchors: Sequence[tuple[Node, int]], budget: int, top_k: int, *,
               rank: Callable[[Node], list[Node]] | None = None) -> tuple[Tree, int]:
    """Expand anchors best-first by path probability (products of top-k frequency shares).
    ``rank``: a node's children, most frequent first (SGLang's order; a test may plant
    another)."""
    tree: Tree = [UnorderedMapOrder() for _ in range(budget + 1)]
    heap: StdPriorityQueue[tuple[int, Node]] = StdPriorityQueue()

    def add(parent: int, node: Node, prob: float) -> None:
        # The node's own ranking by default: trie nodes and automaton states both have one.
        kids = (node.by_frequency() if rank is None else rank(node))[:top_k]
        total = float(sum(k.freq for k in kids)) or 1.0
        for k in kids:
            heap.push(float(k.freq) / total * prob, (parent, k))

    cursor = 1
    for anchor, _ in anchors:
        add(0, anchor, 1.0)
        while heap and cursor <= budget:
            prob, (parent, node) = heap.pop()
            pos = tree[parent].get(node.token)
            if pos is None:
                pos = cursor
                cursor += 1
                tree[parent][node.token] = pos
            add(pos, node, prob)
    return tree, cursor - 1


def level_order(tree: Tree) -> list[tuple[int, int, int]]:
    """``(token, tree index, parent slot)`` of every drafted node, in slot order (1, 2, ...):
    level order, siblings in their libstdc++ map order."""
    out = []
    queue = deque((t, idx, 0) for t, idx in tree[0].items())
    while queue:
        t, idx, p = queue.popleft()
        out.append((t, idx, p))
        slot = len(out)
        queue.extend((t2, i2, slot) for t2, i2 in tree[idx].items())
    return out


def fill_result(last_token: int, n: int, tree: Tree) -> tuple[np.ndarray, np.ndarray]:
    """Lay the tree out in level order and build its ancestor mask, as SGLang's ``fillResult``.

    Returns ``tokens`` (n,) int32 and ``mask`` (n, n) bool; unused slots are token 0 children
    of the root.
    """
    nodes = level_order(tree)
    tokens = [last_token] + [t for t, _, _ in nodes]
    parents = [-1] + [p for _, _, p in nodes]
    while len(tokens) < n:
        tokens.append(0)
        parents.append(0)
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        if parents[i] != -1:
            mask[i, :parents[i] + 1] = mask[parents[i], :parents[i] + 1]
        mask[i, i] = True
    return np.asarray(tokens, dtype=np.int32), mask
