"""Anchor matching: SGLang 0.5.23's per-request ``MatchState`` (spec section 3.2), and 0.5.9's
stateless match windows (legacy spec section 3).

An anchor is the trie node reached by the length-``d`` suffix of the context.  A state caches
one reference per suffix length, advanced incrementally as the request grows; a suffix that was
absent when the state was computed stays absent until the state is rebuilt.  That divergence
from stateless matching is SGLang's, and reproduced on purpose.
"""

from __future__ import annotations

from typing import Sequence

from .trie import Node, Trie

__all__ = ["MatchState", "match_anchors", "window_anchors"]

Ref = tuple[Node, int] | None  # (node, its version when stored), or no node


class MatchState:
    """What SGLang remembers about one request between matches."""

    __slots__ = ("epoch", "processed_total_len", "anchors")

    def __init__(self) -> None:
        self.epoch = 0  # never equal to a trie's epoch: a new state always rebuilds
        self.processed_total_len = 0
        self.anchors: list[Ref] = []  # anchors[d - 1]: the length-d suffix


def _ref(node: Node | None) -> Ref:
    return None if node is None else (node, node.version)


def _is_stale(ref: Ref) -> bool:
    return ref is not None and ref[0].version != ref[1]


def _rebuild(trie: Trie, state: MatchState, context: Sequence[int], total_len: int) -> None:
    depth = min(len(context), trie.max_depth)
    state.anchors = [_ref(trie.walk(context[len(context) - d:])) for d in range(1, depth + 1)]
    state.epoch = trie.epoch
    state.processed_total_len = total_len


def _advance(trie: Trie, state: MatchState, appended: Sequence[int], total_len: int) -> bool:
    if state.epoch != trie.epoch or any(_is_stale(r) for r in state.anchors):
        return False
    for t in appended:
        width = min(len(state.anchors) + 1, trie.max_depth)
        nxt: list[Ref] = [None] * width
        nxt[0] = _ref(trie.root.children.get(t))
        for d in range(1, width):
            ref = state.anchors[d - 1]
            if ref is None:
                continue  # an absent suffix never reappears without a rebuild
            if _is_stale(ref):
                return False
            nxt[d] = _ref(ref[0].children.get(t))
        state.anchors = nxt
    state.processed_total_len = total_len
    return True


def match_anchors(trie: Trie, state: MatchState, context: Sequence[int],
                  total_len: int) -> list[tuple[Node, int]]:
    """Update ``state`` for ``context`` and return the expandable anchors, longest first.

    Returns ``(node, d)`` pairs for every suffix length ``d`` whose node exists and has at least
    one child, ``d`` descending.
    """
    ptl = state.processed_total_len
    forward = total_len >= ptl
    appended = total_len - ptl if forward else 0
    can_advance = (state.epoch == trie.epoch and forward and appended <= len(context)
                   and len(state.anchors) == min(ptl, trie.max_depth))
    if not (can_advance
            and _advance(trie, state, context[len(context) - appended:], total_len)):
        _rebuild(trie, state, context, total_len)
    return [(ref[0], d) for d, ref in reversed(list(enumerate(state.anchors, start=1)))
            if ref is not None and ref[0].children]


def window_anchors(trie: Trie, context: Sequence[int], min_window: int,
                   max_window: int) -> list[tuple[Node, int]]:
    """SGLang 0.5.9's anchors: the context suffixes of ``min_window .. max_window`` tokens.

    Stateless: a pure function of the trie and the context.  Returns ``(node, w)`` for every
    window length ``w`` from ``min(len(context), max_window)`` down to ``min_window`` whose
    suffix is a trie path with at least one child (0.5.9 keeps leaf anchors too, but they add
    nothing to a tree).
    """
    anchors = []
    for w in range(min(len(context), max_window), min_window - 1, -1):
        node = trie.walk(context[len(context) - w:])
        if node is not None and node.children:
            anchors.append((node, w))
    return anchors
