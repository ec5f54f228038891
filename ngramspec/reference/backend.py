"""The reference backend: the readable model behind ``NgramCache(backend="reference")``."""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from ..config import NgramConfig
from .match import MatchState, match_anchors
from .tree import build_bfs, build_prob, fill_result
from .trie import Trie

__all__ = ["ReferenceBackend"]


class ReferenceBackend:
    """SGLang 0.5.23's ``Ngram`` object: one trie plus the match states of live requests.

    Inputs arrive validated (1-D int32 arrays, consistent lengths) from :class:`NgramCache`.
    """

    def __init__(self, config: NgramConfig) -> None:
        self.config = config
        self.trie = Trie(config.max_trie_depth, config.capacity)
        self.states: dict[Hashable, MatchState] = {}

    def insert(self, sequences: Sequence[np.ndarray]) -> None:
        for seq in sequences:
            self.trie.insert(seq.tolist())

    def match(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
              total_lens: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cfg = self.config
        n = cfg.draft_token_num
        tokens = np.zeros((len(contexts), n), dtype=np.int32)
        mask = np.zeros((len(contexts), n, n), dtype=bool)
        num_drafts = np.zeros(len(contexts), dtype=np.int32)
        for b, ctx in enumerate(contexts):
            context = ctx.tolist()
            if keys is None:
                state = MatchState()  # stateless: a fresh state rebuilds from the context
                total_len = len(context)
            else:
                state = self.states.setdefault(keys[b], MatchState())
                assert total_lens is not None
                total_len = int(total_lens[b])
            anchors = match_anchors(self.trie, state, context, total_len)
            if cfg.match_type == "BFS":
                tree, used = build_bfs(anchors, cfg.budget, cfg.max_trie_depth,
                                       cfg.min_bfs_breadth, cfg.max_bfs_breadth)
            else:
                tree, used = build_prob(anchors, cfg.budget, cfg.max_bfs_breadth)
            tokens[b], mask[b] = fill_result(context[-1], n, tree)
            num_drafts[b] = used
        return tokens, mask, num_drafts

    def erase(self, keys: Sequence[Hashable]) -> None:
        for key in keys:
            self.states.pop(key, None)

    def reset(self) -> None:
        self.trie.reset()
        self.states.clear()

    @property
    def node_count(self) -> int:
        return self.trie.size
