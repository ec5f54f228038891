"""Realistic bugs of an n-gram drafter port, planted in caches built on ngramspec's own backends
(for tests of ``ngramspec.testing``; the tests import this module as ``tests.planted``).

Each factory takes an ``NgramConfig`` and returns a cache in ``NgramCache``'s shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import ngramspec as ns
from ngramspec.reference import ReferenceBackend
from ngramspec.reference.trie import Node, Trie
from ngramspec.reference.tree import build_bfs, build_prob, fill_result
from ngramspec.stdorder import UnorderedMapOrder


class _PlantedBackend(ReferenceBackend):
    """The reference backend with a hook between tree building and layout."""

    def build(self, anchors):
        cfg = self.config
        if cfg.match_type == "BFS":
            return build_bfs(anchors, cfg.budget, self.schedule)
        return build_prob(anchors, cfg.budget, cfg.max_bfs_breadth)

    def match(self, contexts, keys, total_lens):
        n = self.config.draft_token_num
        tokens = np.zeros((len(contexts), n), dtype=np.int32)
        mask = np.zeros((len(contexts), n, n), dtype=bool)
        num_drafts = np.zeros(len(contexts), dtype=np.int32)
        for b, ctx in enumerate(contexts):
            context = ctx.tolist()
            key, total = (None, len(context)) if keys is None else (keys[b], int(total_lens[b]))
            tree, used = self.build(self._anchors(context, key, total))
            tokens[b], mask[b] = fill_result(context[-1], n, tree)
            num_drafts[b] = used
        return tokens, mask, num_drafts


def _planted(backend_cls: type[ReferenceBackend]) -> Callable[[ns.NgramConfig], ns.NgramCache]:
    def make(config: ns.NgramConfig) -> ns.NgramCache:
        cache = ns.NgramCache(config=config, backend="reference")
        cache._backend = backend_cls(config)
        return cache
    return make


# 1. Siblings in the wrong order past a fan-out: the port models libstdc++'s unordered_map
#    order with its first 13 buckets but never rehashes (at 14 children, 30, ...).

class _NoRehash(UnorderedMapOrder):
    __slots__ = ()

    def _rehash_threshold(self) -> int:
        return 0 if self._bucket_count == 1 else 1 << 62


class SiblingsPastFanout(_PlantedBackend):
    def build(self, anchors):
        tree, used = super().build(anchors)
        out = []
        for node in tree:
            m = _NoRehash()
            for token, idx in sorted(node.items(), key=lambda kv: kv[1]):  # insertion order
                m[token] = idx
            out.append(m)
        return out, used


# 2. Off-by-one in the insert window: each suffix path stops one token short of the depth.

class InsertWindowShort(_PlantedBackend):
    def insert(self, sequences):
        depth = self.config.trie_depth
        for seq in sequences:
            t = seq.tolist()
            for i in range(max(0, len(t) - self.insert_skip)):
                self.trie.insert(t[i:i + depth - 1], [0])


# 3. PROB ties broken the other way: equal frequencies ordered by token descending.

def _build_prob_ties_flipped(anchors, budget, top_k):
    return build_prob(anchors, budget, top_k, rank=lambda node: sorted(
        node.children.values(), key=lambda k: (-k.freq, -k.token)))


class ProbTiesFlipped(_PlantedBackend):
    def build(self, anchors):
        if self.config.match_type == "PROB":
            return _build_prob_ties_flipped(anchors, self.config.budget,
                                            self.config.max_bfs_breadth)
        return super().build(anchors)


# 4. Eviction of a non-leaf: the port refreshes a path's recency shallow-first, so the back of
#    its LRU list can be an inner node, which it then evicts with its whole subtree.

class _ShallowFirstTrie(Trie):
    def insert(self, tokens, start_positions=None, count_from=0):
        n = len(tokens)
        for i in (range(n) if start_positions is None else start_positions):
            length = min(n - i, self.max_depth)
            if length > self.free:
                self._squeeze(length - self.free)
            cur, path = self.root, []
            for t in tokens[i:i + length]:
                child = cur.children.get(t)
                if child is None:
                    child = Node(t, cur)
                    child.freq = 1
                    cur.children[t] = child
                    cur.lru.insert(0, child)
                    self.global_lru[child] = None
                else:
                    child.freq += 1
                    cur.lru.remove(child)
                    cur.lru.insert(0, child)
                cur = child
                path.append(child)
            for node in path:  # the bug: should be reversed(path)
                self.global_lru.move_to_end(node, last=False)

    def _squeeze(self, count):
        freed = 0
        while freed < count and self.global_lru:
            node, _ = self.global_lru.popitem(last=True)
            node.parent.children.pop(node.token)
            node.parent.lru.remove(node)
            stack = [node]
            while stack:  # the subtree goes with it
                x = stack.pop()
                x.version += 1
                freed += 1
                for c in x.children.values():
                    self.global_lru.pop(c, None)
                    stack.append(c)


class EvictsInnerNodes(_PlantedBackend):
    def __init__(self, config):
        super().__init__(config)
        self.trie = _ShallowFirstTrie(config.trie_depth, config.capacity)


# 5. BFS breadth rounded instead of truncated (C++'s double -> int conversion truncates).

def _build_bfs_rounded(anchors, budget, schedule):
    return build_bfs(anchors, budget, schedule, to_int=round)  # the bug: rounds


class BfsBreadthRounded(_PlantedBackend):
    def build(self, anchors):
        if self.config.match_type == "BFS":
            return _build_bfs_rounded(anchors, self.config.budget, self.schedule)
        return super().build(anchors)


# 6. A stale match state after erase: a wrapper whose erase forgets nothing (public API only).

class StaleAfterErase:
    def __init__(self, config: ns.NgramConfig) -> None:
        self.inner = ns.NgramCache(config=config, backend="numba")

    def insert(self, sequences: Any) -> None:
        self.inner.insert(sequences)

    def match(self, contexts: Any, request_ids: Any = None, total_lens: Any = None):
        return self.inner.match(contexts, request_ids=request_ids, total_lens=total_lens)

    def erase(self, request_ids: Any) -> None:
        pass  # the bug: the requests' match states survive

    def reset(self) -> None:
        self.inner.reset()


PLANTED: dict[str, Callable[[ns.NgramConfig], Any]] = {
    "siblings_past_fanout": _planted(SiblingsPastFanout),
    "insert_window_short": _planted(InsertWindowShort),
    "prob_ties_flipped": _planted(ProbTiesFlipped),
    "evicts_inner_nodes": _planted(EvictsInnerNodes),
    "bfs_breadth_rounded": _planted(BfsBreadthRounded),
    "stale_after_erase": StaleAfterErase,
}
