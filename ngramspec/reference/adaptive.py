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
(``n = d`` below the anchor itself).

With ``calibrated_estimates`` a child's conditional probability is not its count ratio but
the calibrated estimate of :mod:`ngramspec.config.acceptance_table`
(:func:`calibrated_conditional`).  With ``min_expected_accept="auto"`` the tree is cut after
construction to the first ``k`` nodes in creation order (every such prefix is a tree), ``k``
chosen over the batch by :func:`choose_cap`, and laid out as the construction would have
after its ``k``-th node (:func:`prefix_tree`).  The layout is SGLang's
(level order, libstdc++ sibling order), so every output format applies unchanged.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Sequence

from ..stdorder import UnorderedMapOrder
from .match import window_anchors
from .trie import Node, Trie

__all__ = ["AdaptiveParams", "stateless_anchors", "build_adaptive", "calibrated_conditional",
           "choose_cap", "prefix_tree"]

Tree = list[UnorderedMapOrder]


class AdaptiveParams:
    """The knobs of the ADAPTIVE builder, as plain numbers."""

    __slots__ = ("budget", "min_token_prob", "max_spec_factor", "min_expected_accept",
                 "shared_pseudo_count", "calibration")

    def __init__(self, budget: int, min_token_prob: float, max_spec_factor: float,
                 min_expected_accept: float, shared_pseudo_count: float = 0.0,
                 calibration: Sequence[float] = ()) -> None:
        self.budget = budget
        self.min_token_prob = min_token_prob
        self.max_spec_factor = max_spec_factor
        self.min_expected_accept = min_expected_accept  # 0 with "auto": cut afterwards
        self.shared_pseudo_count = shared_pseudo_count
        self.calibration = list(calibration)  # empty: count ratios

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


def _depth(node: Node) -> int:
    d = 0
    while node.parent is not None:
        node = node.parent
        d += 1
    return d


def calibrated_conditional(table: Sequence[float], source: int, context_len: int, level: int,
                           total: int, rank: int, freq: int) -> float:
    """The calibrated probability that the target continues with a child, clipped to [0, 1].

    ``table`` (:func:`ngramspec.config.acceptance_table.calibration_array`): ``[nc, nt, nl,
    context-length bin edges (nc), total bin edges (nt), level bin edges (nl), (a, b) per
    (source, context bin, total bin, level bin, rank 0 or not)]``; the estimate is
    ``a + b * freq / total`` of the child's cell.  ``source``: 0 for the request's own trie,
    1 for the shared one; ``context_len``: the matched length the child continues (the longest
    anchor's length in its source plus the child's depth below its anchor, minus one);
    ``level``: its parent's level below the anchor (0: the parent is the anchor; else the
    drafted nodes the path has confirmed before the child, where a long copy makes the next
    token likelier than a short one does); ``rank``: its place among the siblings pushed.
    """
    nc, nt, nl = int(table[0]), int(table[1]), int(table[2])
    c_edges = table[3:3 + nc]
    t_edges = table[3 + nc:3 + nc + nt]
    l_edges = table[3 + nc + nt:3 + nc + nt + nl]
    ci = max(i for i in range(nc) if i == 0 or c_edges[i] <= context_len)
    ti = max(i for i in range(nt) if i == 0 or t_edges[i] <= total)
    li = max(i for i in range(nl) if i == 0 or l_edges[i] <= level)
    at = 3 + nc + nt + nl + ((((source * nc + ci) * nt + ti) * nl + li) * 2 + min(rank, 1)) * 2
    q = table[at] + table[at + 1] * (float(freq) / float(total))
    return min(1.0, max(0.0, q))


def build_adaptive(sources: Sequence[Sequence[tuple[Node, int]]],
                   params: AdaptiveParams, source_ids: Sequence[int] | None = None, *,
                   record: list | None = None) -> tuple[Tree, list[float], int]:
    """Expand the anchors of every source, in order, into one scored tree.

    Returns the tree (node 0 = root, each node's children in a libstdc++-ordered map), the
    probability of every tree node (index 0: the root, 1.0) and the drafted node count.
    ``source_ids``: per source, 0 (the request's own trie) or 1 (shared; the default for
    all), for the calibrated estimates.  ``record``, if given, receives the calibration cell of
    every node created, in creation order: ``(source, context length, level below the anchor,
    parent's count total, rank, count ratio)`` (the edges the calibration table is fitted on).
    """
    budget = params.budget
    cal = params.calibration
    tree: Tree = [UnorderedMapOrder()]
    probs = [1.0]
    levels = [0]  # tree level of every tree node (the root: 0)
    if source_ids is None:
        source_ids = [1] * len(sources)
    for s, (src, anchors) in enumerate(zip(source_ids, sources)):
        pseudo = params.shared_pseudo_count if s == len(sources) - 1 else 0.0
        d_top = anchors[0][1] if anchors else 0  # the context's match length in this source
        for anchor, d in anchors:
            limit = params.anchor_budget(d)
            if len(tree) - 1 >= limit:
                continue
            heap: list[tuple[float, int, int, Node, tuple | None]] = []
            order = itertools.count()

            def push_children(pos: int, node: Node, prob: float) -> None:
                kids = _scored_children(node, prob, pseudo, d + levels[pos])
                total = _conditional_total(node)
                # The matched length the child continues, counted from the longest anchor.
                below = _depth(node) - d if cal or record is not None else 0
                for rank, (p, _, child) in enumerate(kids[:budget]):
                    if cal:
                        p = prob * calibrated_conditional(cal, src, below + d_top, below,
                                                          total, rank, child.freq)
                    cell = None if record is None else (src, below + d_top, below, total, rank,
                                                        child.freq / total)
                    heapq.heappush(heap, (-p, next(order), pos, child, cell))

            push_children(0, anchor, 1.0)
            while heap and len(tree) - 1 < limit:
                neg_p, _, parent, node, cell = heapq.heappop(heap)
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
                    if record is not None:
                        record.append(cell)
                else:
                    probs[pos] = max(probs[pos], p)
                push_children(pos, node, p)
    used = len(tree) - 1
    if used and 1.0 + sum(probs[1:]) < params.min_expected_accept:
        return [UnorderedMapOrder()], [1.0], 0
    return tree, probs, used


def choose_cap(probs: Sequence[Sequence[float]], costs: Sequence[float],
               rate: list[float]) -> int:
    """``min_expected_accept="auto"``: the cap ``k`` on drafted nodes per request for one
    step.

    ``probs[b]``: request ``b``'s node probabilities in creation order (index 0: the root);
    ``costs[k]``: the step's time when the largest tree holds ``k`` drafts.  Under cap ``k``
    the batch expects ``E(k) = sum_b (1 + sum(probs[b][1:k + 1]))`` tokens.  The cap maximises
    ``E(k) - lam * costs[k]``, where ``lam`` is the expected tokens per unit of time of the
    steps so far (``rate = [their expected tokens, their time]``, updated here; before the
    first step, the plain decode's rate): a step drafts more only where that buys tokens
    faster than the run makes them on average, which maximises the run's expected tokens per
    unit of time (not each step's).  Ties go to the smaller cap.
    """
    used = [len(p) - 1 for p in probs]
    lam = len(probs) * (rate[0] / rate[1]) if rate[1] > 0.0 else float(len(probs)) / costs[0]
    total = float(len(probs))  # accumulated cap by cap, requests in batch order
    best, best_total, cap = total - lam * costs[0], total, 0
    for k in range(1, max(used, default=0) + 1):
        for b, p in enumerate(probs):
            if k <= used[b]:
                total += p[k]
        if total - lam * costs[k] > best:
            best, best_total, cap = total - lam * costs[k], total, k
    rate[0] += best_total
    rate[1] += costs[cap] * len(probs)
    return cap


def prefix_tree(tree: Tree, k: int) -> Tree:
    """The first ``k`` nodes of ``tree`` (creation order), inserted again in that order: the
    maps the construction held after its ``k``-th node."""
    parent = {}
    for p, children in enumerate(tree):
        for token, idx in children.items():
            parent[idx] = (p, token)
    out: Tree = [UnorderedMapOrder()]
    for idx in range(1, k + 1):
        p, token = parent[idx]
        out[p][token] = idx
        out.append(UnorderedMapOrder())
    return out
