"""Readable model of the ADAPTIVE draft tree (an ngramspec option; SGLang has no such mode).

Candidates are scored by an estimate of the probability that the target produces their whole
path.  For a trie node ``x`` below an anchor, ``P(child | x) = freq(child) / max(freq(x),
sum of the children's freq)`` (the max keeps it a probability where a node was created without
being counted), and a path's probability is the product along it, starting at 1 below the
anchor.  Sources are tries (a request's own index first, then the shared one); within each,
anchors are the context suffixes that are trie paths with children, longest first.  Each anchor
is expanded best-first into the one shared draft tree:

- a candidate below ``min_token_prob`` ends the anchor (every later one is no more probable);
- an anchor of length ``d`` stops once the tree holds ``max(1, int(max_spec_factor * d))``
  nodes (with ``max_spec_factor > 0``; short matches earn short drafts), and every anchor stops
  at ``draft_token_num - 1``;
- a candidate whose token is already below the same tree node merges into it (the node keeps
  the larger probability) and expands from there.

Ties in probability go to the candidate pushed first; a node's children are pushed by
frequency descending, then in the trie's recency order (most recent first), and only the
``draft_token_num - 1`` best of them.  When ``1 + sum of the probabilities`` (the expected
accept length) is below ``min_expected_accept``, nothing is drafted.

With ``shared_pseudo_count`` ``c > 0``, the last source (the shared trie) estimates
``P(child | x) = freq(child) / (total + c / n)`` instead, where ``n`` is the length of the
context ``x`` continues: the anchor's length plus the tree level of the node being expanded
(``n = d`` below the anchor itself).  The layout is SGLang's
(level order, libstdc++ sibling order), so every output format applies unchanged.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Sequence

from ..stdorder import UnorderedMapOrder
from .match import window_anchors
from .trie import Node, Trie

__all__ = ["AdaptiveParams", "stateless_anchors", "build_adaptive"]

Tree = list[UnorderedMapOrder]


class AdaptiveParams:
    """The knobs of the ADAPTIVE builder, as plain numbers."""

    __slots__ = ("budget", "min_token_prob", "max_spec_factor", "min_expected_accept",
                 "shared_pseudo_count")

    def __init__(self, budget: int, min_token_prob: float, max_spec_factor: float,
                 min_expected_accept: float, shared_pseudo_count: float = 0.0) -> None:
        self.budget = budget
        self.min_token_prob = min_token_prob
        self.max_spec_factor = max_spec_factor
        self.min_expected_accept = min_expected_accept
        self.shared_pseudo_count = shared_pseudo_count

    def anchor_budget(self, d: int) -> int:
        if self.max_spec_factor <= 0:
            return self.budget
        return min(self.budget, max(1, int(self.max_spec_factor * d)))


def stateless_anchors(trie: Trie, context: Sequence[int]) -> list[tuple[Node, int]]:
    """``(node, d)`` for every context suffix of length ``d`` that is a path with children,
    longest first (0.5.9's window rule with the window ``1 .. trie depth``)."""
    return window_anchors(trie, context, 1, trie.max_depth)


def _conditional_total(node: Node) -> int:
    return max(node.freq, sum(c.freq for c in node.children.values()))


def _scored_children(node: Node, prob: float, pseudo: float, context_len: int
                     ) -> list[tuple[float, int, Node]]:
    """``(path probability, recency rank, child)`` for every child of ``node``, the best first
    (probability descending, then most recent first); ``pseudo``: the pseudo-count
    (``shared_pseudo_count``, 0 = none) spread over a context of ``context_len`` tokens."""
    total = _conditional_total(node)
    if total <= 0:
        return []
    if pseudo > 0.0:
        denom = total + pseudo / context_len
        kids = [(prob * c.freq / denom, i, c) for i, c in enumerate(node.lru)]
    else:
        kids = [(prob * c.freq / total, i, c) for i, c in enumerate(node.lru)]
    kids.sort(key=lambda k: (-k[0], k[1]))
    return kids


def build_adaptive(sources: Sequence[Sequence[tuple[Node, int]]],
                   params: AdaptiveParams) -> tuple[Tree, list[float], int]:
    """Expand the anchors of every source, in order, into one scored tree.

    Returns the tree (node 0 = root, each node's children in a libstdc++-ordered map), the
    probability of every tree node (index 0: the root, 1.0) and the drafted node count.
    """
    budget = params.budget
    tree: Tree = [UnorderedMapOrder()]
    probs = [1.0]
    levels = [0]  # tree level of every tree node (the root: 0)
    for s, anchors in enumerate(sources):
        pseudo = params.shared_pseudo_count if s == len(sources) - 1 else 0.0
        for anchor, d in anchors:
            limit = params.anchor_budget(d)
            if len(tree) - 1 >= limit:
                continue
            heap: list[tuple[float, int, int, Node]] = []
            order = itertools.count()

            def push_children(pos: int, node: Node, prob: float) -> None:
                kids = _scored_children(node, prob, pseudo, d + levels[pos])
                for p, _, child in kids[:budget]:
                    heapq.heappush(heap, (-p, next(order), pos, child))

            push_children(0, anchor, 1.0)
            while heap and len(tree) - 1 < limit:
                neg_p, _, parent, node = heapq.heappop(heap)
                p = -neg_p
                if p <= 0.0 or p < params.min_token_prob:
                    break
                pos = tree[parent].get(node.token)
                if pos is None:
                    pos = len(tree)
                    tree[parent][node.token] = pos
                    tree.append(UnorderedMapOrder())
                    probs.append(p)
                    levels.append(levels[parent] + 1)
                else:
                    probs[pos] = max(probs[pos], p)
                push_children(pos, node, p)
    used = len(tree) - 1
    if used and 1.0 + sum(probs[1:]) < params.min_expected_accept:
        return [UnorderedMapOrder()], [1.0], 0
    return tree, probs, used
