"""The reference backend: the readable model behind ``NgramCache(backend="reference")``."""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from ..config import NgramConfig
from .adaptive import AdaptiveParams, build_adaptive, stateless_anchors
from .match import MatchState, match_anchors, window_anchors
from .tree import BreadthSchedule, build_bfs, build_prob, fill_result, level_order
from .trie import Trie

__all__ = ["ReferenceBackend"]


class ReferenceBackend:
    """SGLang's ``Ngram`` object: one trie plus (0.5.23) the match states of live requests.

    The two profiles share the trie, the builders and the layout; they differ in three named
    pieces chosen here: which suffix starts an insert walks (:meth:`insert`), which context
    suffixes are anchors (:meth:`_anchors`) and the BFS breadth schedule (``self.schedule``).
    Inputs arrive validated (1-D int32 arrays, consistent lengths) from :class:`NgramCache`.
    """

    def __init__(self, config: NgramConfig) -> None:
        self.config = config
        self.trie = Trie(config.trie_depth, config.capacity)
        self.states: dict[Hashable, MatchState] = {}
        if config.stateful:
            self.schedule = BreadthSchedule.sglang_0523(
                config.trie_depth, config.min_bfs_breadth, config.max_bfs_breadth)
            self.insert_skip = 0  # 0.5.23 inserts every suffix, the last token alone included
        else:
            lo, hi = config.min_match_window_size, config.max_match_window_size
            assert lo is not None and hi is not None
            self.schedule = BreadthSchedule.sglang_059(
                lo, hi, config.min_bfs_breadth, config.max_bfs_breadth)
            self.insert_skip = lo  # 0.5.9 skips the suffixes of min_match_window_size or fewer

    def insert(self, sequences: Sequence[np.ndarray]) -> None:
        for seq in sequences:
            tokens = seq.tolist()
            # Suffix starts i with i + skip < len(tokens).
            self.trie.insert(tokens, range(max(0, len(tokens) - self.insert_skip)))

    def _anchors(self, context: list[int], key: Hashable | None, total_len: int):
        cfg = self.config
        if not cfg.stateful:
            assert cfg.min_match_window_size is not None and cfg.max_match_window_size is not None
            return window_anchors(self.trie, context, cfg.min_match_window_size,
                                  cfg.max_match_window_size)
        # 0.5.23: the request's state; without an id, a fresh one (a stateless rebuild).
        state = MatchState() if key is None else self.states.setdefault(key, MatchState())
        return match_anchors(self.trie, state, context, total_len)

    def match(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
              total_lens: np.ndarray | None, *, budget: int | None = None,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``budget``: drafted nodes (default ``config.budget``; less with corpora, whose
        trees are merged in afterwards); the result has ``budget + 1`` slots."""
        cfg = self.config
        budget = cfg.budget if budget is None else budget
        n = budget + 1
        tokens = np.zeros((len(contexts), n), dtype=np.int32)
        mask = np.zeros((len(contexts), n, n), dtype=bool)
        num_drafts = np.zeros(len(contexts), dtype=np.int32)
        for b, ctx in enumerate(contexts):
            context = ctx.tolist()
            if keys is None:
                key, total_len = None, len(context)
            else:
                assert total_lens is not None
                key, total_len = keys[b], int(total_lens[b])
            anchors = self._anchors(context, key, total_len)
            if cfg.match_type == "BFS":
                tree, used = build_bfs(anchors, budget, self.schedule)
            else:
                tree, used = build_prob(anchors, budget, cfg.max_bfs_breadth)
            tokens[b], mask[b] = fill_result(context[-1], n, tree)
            num_drafts[b] = used
        return tokens, mask, num_drafts

    def insert_counted(self, sequences: Sequence[np.ndarray], count_from: Sequence[int]) -> None:
        """Exact counting: every suffix inserted, only positions ``>= count_from`` counted."""
        for seq, first in zip(sequences, count_from):
            self.trie.insert(seq.tolist(), count_from=int(first))

    def match_adaptive(self, contexts: Sequence[np.ndarray],
                       local: Sequence["ReferenceBackend | None"] | None = None,
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """ADAPTIVE drafts (stateless); ``local[b]``: request b's own backend, searched first."""
        cfg = self.config
        n = cfg.draft_token_num
        params = AdaptiveParams(cfg.budget, cfg.min_token_prob, cfg.max_spec_factor,
                                cfg.min_expected_accept)
        tokens = np.zeros((len(contexts), n), dtype=np.int32)
        mask = np.zeros((len(contexts), n, n), dtype=bool)
        num_drafts = np.zeros(len(contexts), dtype=np.int32)
        probs = np.zeros((len(contexts), n), dtype=np.float64)
        for b, ctx in enumerate(contexts):
            context = ctx.tolist()
            own = local[b] if local is not None else None
            sources = [] if own is None else [stateless_anchors(own.trie, context)]
            sources.append(stateless_anchors(self.trie, context))
            tree, tree_probs, used = build_adaptive(sources, params)
            tokens[b], mask[b] = fill_result(context[-1], n, tree)
            probs[b, :used + 1] = [1.0] + [tree_probs[idx] for _, idx, _ in level_order(tree)]
            num_drafts[b] = used
        return tokens, mask, num_drafts, probs

    def erase(self, keys: Sequence[Hashable]) -> None:
        for key in keys:
            self.states.pop(key, None)

    def reset(self) -> None:
        self.trie.reset()
        self.states.clear()

    @property
    def node_count(self) -> int:
        return self.trie.size

    def check_integrity(self) -> None:
        """Raise :class:`~ngramspec.errors.IntegrityError` if an invariant is broken."""
        from .integrity import check_reference

        check_reference(self)
