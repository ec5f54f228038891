"""Pure-Python reference model of SGLang's NGRAM drafter, written for obviousness.

Every fast path in ngramspec is tested against this package, and this package against
SGLang's golden outputs.
"""

from .backend import ReferenceBackend
from .match import MatchState, match_anchors, window_anchors
from .tree import BreadthSchedule, build_bfs, build_prob, fill_result
from .trie import Node, Trie

__all__ = ["ReferenceBackend", "MatchState", "match_anchors", "window_anchors", "BreadthSchedule",
           "build_bfs", "build_prob", "fill_result", "Node", "Trie"]
