"""Readable model of SGLang 0.5.23's n-gram trie: insert, leaf-only LRU eviction, reset.

One Python object per node, plain lists and dicts: written to be read beside the spec, not to
be fast.  The fast engine is tested against this.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

__all__ = ["Node", "Trie"]


class Node:
    """A trie node: the last token of a root path and what hangs below it."""

    __slots__ = ("token", "parent", "children", "lru", "freq", "version", "__weakref__")

    def __init__(self, token: int, parent: "Node | None") -> None:
        self.token = token
        self.parent = parent
        self.children: dict[int, Node] = {}  # lookup by token
        self.lru: list[Node] = []  # children, most recently touched first
        self.freq = 0
        self.version = 1  # bumped on eviction, so that stored references can tell

    def by_frequency(self) -> list["Node"]:
        """Children in PROB order: frequency descending, then token ascending."""
        return sorted(self.children.values(), key=lambda n: (-n.freq, n.token))

    def __repr__(self) -> str:
        return f"Node(token={self.token}, freq={self.freq}, children={len(self.children)})"


class Trie:
    """The shared trie of recent n-grams, bounded to ``capacity`` nodes (root included).

    Parameters
    ----------
    max_depth : int
        Longest path stored (SGLang's ``max_trie_depth``).
    capacity : int
        Node pool size, root included; must exceed ``max_depth``.
    """

    def __init__(self, max_depth: int, capacity: int) -> None:
        self.max_depth = max_depth
        self.capacity = capacity
        self.epoch = 1
        self._new_root()

    def _new_root(self) -> None:
        self.root = Node(0, None)
        # Global LRU over all non-root nodes: first = most recent (front), last = back.
        self.global_lru: OrderedDict[Node, None] = OrderedDict()

    @property
    def size(self) -> int:
        """Nodes in use, root included."""
        return len(self.global_lru) + 1

    @property
    def free(self) -> int:
        return self.capacity - self.size

    def reset(self) -> None:
        self.epoch += 1
        self._new_root()

    def insert(self, tokens: Sequence[int], start_positions: Sequence[int] | None = None,
               count_from: int = 0) -> None:
        """Insert every suffix of ``tokens`` (truncated to ``max_depth``) as a root path.

        ``start_positions`` are the suffix starts to insert, in order; by default all of them
        (SGLang 0.5.23 inserts every suffix, the last token alone included).  ``count_from``
        (ngramspec's exact counting; 0 = SGLang): a node reached at a token position before
        it is walked and touched but not counted, and starts at ``freq`` 0 when created.
        """
        n = len(tokens)
        starts = range(n) if start_positions is None else start_positions
        for i in starts:
            length = min(n - i, self.max_depth)
            # SGLang evicts before walking, as if every node of the path were new.
            if length > self.free:
                self._squeeze(length - self.free)
            cur = self.root
            path = []
            for k, t in enumerate(tokens[i:i + length]):
                counted = i + k >= count_from
                child = cur.children.get(t)
                if child is None:
                    child = Node(t, cur)
                    child.freq = 1 if counted else 0
                    cur.children[t] = child
                    cur.lru.insert(0, child)
                    self.global_lru[child] = None  # new nodes start at the back
                else:
                    child.freq += counted
                    cur.lru.remove(child)
                    cur.lru.insert(0, child)
                cur = child
                path.append(child)
            # Deepest first to the front, so the final order is shallow ... deep, older nodes.
            for node in reversed(path):
                self.global_lru.move_to_end(node, last=False)

    def _squeeze(self, count: int) -> None:
        for _ in range(count):
            node, _ = self.global_lru.popitem(last=True)
            assert not node.children, "the LRU back is always a leaf"
            parent = node.parent
            assert parent is not None
            del parent.children[node.token]
            parent.lru.remove(node)
            node.version += 1

    def walk(self, tokens: Sequence[int]) -> Node | None:
        """The node reached from the root along ``tokens``, or None."""
        cur: Node | None = self.root
        for t in tokens:
            assert cur is not None
            cur = cur.children.get(t)
            if cur is None:
                return None
        return cur
