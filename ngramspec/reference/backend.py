"""The reference backend: the readable model behind ``NgramCache(backend="reference")``."""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from .._canonical import CanonicalContent
from ..config import NgramConfig
from .adaptive import AdaptiveParams, build_adaptive, choose_cap, prefix_tree, stateless_anchors
from .match import MatchState, match_anchors, window_anchors
from .tree import BreadthSchedule, build_bfs, build_prob, fill_result, level_order
from .trie import Node, Trie

__all__ = ["ReferenceBackend"]


class ReferenceBackend:
    """SGLang's ``Ngram`` object: one trie plus (0.5.23) the match states of live requests.

    The two profiles share the trie, the builders and the layout; they differ in three named
    pieces chosen here: which suffix starts an insert walks (:meth:`insert`), which context
    suffixes are anchors (:meth:`_anchors`) and the BFS breadth schedule (``self.schedule``).
    Inputs arrive validated (1-D int32 arrays, consistent lengths) from :class:`NgramCache`.
    """

    pooled = False  # no output pool: every match goes through :meth:`match`

    def __init__(self, config: NgramConfig) -> None:
        self.config = config
        self.trie = Trie(config.trie_depth, config.capacity)
        self.states: dict[Hashable, MatchState] = {}
        self.auto_rate = [0.0, 0.0]  # min_expected_accept="auto": expected tokens, time
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

    def insert_packed(self, flat: np.ndarray, offsets: np.ndarray,
                      count_from: np.ndarray | None = None) -> None:
        """:meth:`insert` (or :meth:`insert_counted`) of sequences packed end to end."""
        seqs = [flat[offsets[i]:offsets[i + 1]] for i in range(offsets.size - 1)]
        if count_from is None:
            self.insert(seqs)
        else:
            self.insert_counted(seqs, count_from.tolist())

    def insert_counted(self, sequences: Sequence[np.ndarray], count_from: Sequence[int]) -> None:
        """Exact counting: every suffix inserted, only positions ``>= count_from`` counted."""
        for seq, first in zip(sequences, count_from):
            self.trie.insert(seq.tolist(), count_from=int(first))

    def match_adaptive(self, contexts: Sequence[np.ndarray],
                       local: Sequence["ReferenceBackend | None"] | None = None,
                       costs: np.ndarray | None = None,
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """ADAPTIVE drafts (stateless); ``local[b]``: request b's own backend, searched first.
        ``costs`` (``min_expected_accept="auto"``): the step time per drafted-node cap; every
        tree is cut to the cap :func:`~.adaptive.choose_cap` picks for the batch."""
        from ..config.acceptance_table import calibration_array

        cfg = self.config
        n = cfg.draft_token_num
        auto = costs is not None
        params = AdaptiveParams(cfg.budget, cfg.min_token_prob, cfg.max_spec_factor,
                                0.0 if auto else cfg.min_expected_accept,
                                cfg.shared_pseudo_count, calibration_array(cfg).tolist())
        tokens = np.zeros((len(contexts), n), dtype=np.int32)
        mask = np.zeros((len(contexts), n, n), dtype=bool)
        num_drafts = np.zeros(len(contexts), dtype=np.int32)
        probs = np.zeros((len(contexts), n), dtype=np.float64)
        built = [ctx.tolist() for ctx in contexts]
        trees = []
        for b, context in enumerate(built):
            own = local[b] if local is not None else None
            sources = [] if own is None else [stateless_anchors(own.trie, context)]
            sources.append(stateless_anchors(self.trie, context))
            trees.append(build_adaptive(sources, params, [0, 1][-len(sources):]))
        if auto:
            cap = choose_cap([tree_probs for _, tree_probs, _ in trees], costs.tolist(),
                             self.auto_rate)
            trees = [(prefix_tree(tree, min(used, cap)), tree_probs, min(used, cap))
                     for tree, tree_probs, used in trees]
        for b, (tree, tree_probs, used) in enumerate(trees):
            tokens[b], mask[b] = fill_result(built[b][-1], n, tree)
            probs[b, :used + 1] = [1.0] + [tree_probs[idx] for _, idx, _ in level_order(tree)]
            num_drafts[b] = used
        return tokens, mask, num_drafts, probs

    def erase(self, keys: Sequence[Hashable]) -> None:
        for key in keys:
            self.states.pop(key, None)

    def reset(self) -> None:
        self.trie.reset()
        self.states.clear()
        self.auto_rate = [0.0, 0.0]

    def reserve(self) -> None:
        pass  # nodes are Python objects made as needed: nothing to allocate ahead

    @property
    def node_count(self) -> int:
        return self.trie.size

    # Canonical content (what a saved file holds) ------------------------------------------

    def to_canonical(self) -> CanonicalContent:
        """The trie and match states, independent of object identity and history
        (:class:`~ngramspec._canonical.CanonicalContent`; states in id order)."""
        trie = self.trie
        nodes = list(trie.global_lru)  # most recently touched first
        index = {id(node): k for k, node in enumerate(nodes)}
        index[id(trie.root)] = -1
        depth = self.config.trie_depth
        # States in id order (ints ascending, then strs), as the engine lists them.
        keys = sorted(self.states, key=lambda k: (isinstance(k, str), k)) \
            if self.config.stateful else []
        s_epoch, ptl = np.zeros(len(keys), np.int64), np.zeros(len(keys), np.int64)
        count, refs = np.zeros(len(keys), np.int32), np.full((len(keys), depth), -1, np.int32)
        for i, key in enumerate(keys):
            st = self.states[key]
            s_epoch[i], ptl[i], count[i] = st.epoch, st.processed_total_len, len(st.anchors)
            for d, ref in enumerate(st.anchors):
                if ref is not None:
                    node, version = ref
                    fresh = st.epoch == trie.epoch and version == node.version
                    refs[i, d] = index[id(node)] if fresh else -2
        return CanonicalContent(
            epoch=int(trie.epoch),
            node_token=np.asarray([n.token for n in nodes], np.int32).reshape(-1),
            node_parent=np.asarray([index[id(n.parent)] for n in nodes], np.int32).reshape(-1),
            node_freq=np.asarray([n.freq for n in nodes], np.int32).reshape(-1),
            request_ids=keys, state_epoch=s_epoch, state_processed_len=ptl, state_count=count,
            state_refs=refs)

    @classmethod
    def from_canonical(cls, config: NgramConfig, content: CanonicalContent
                       ) -> "ReferenceBackend":
        """A backend holding validated canonical content (see :mod:`ngramspec.cache.persist`)."""
        backend = cls(config)
        trie = backend.trie
        trie.epoch = int(content.epoch)
        nodes: list[Node] = []
        for tok, par, freq in zip(content.node_token.tolist(), content.node_parent.tolist(),
                                  content.node_freq.tolist()):
            parent = trie.root if par == -1 else nodes[par]
            node = Node(tok, parent)
            node.freq = freq
            parent.children[tok] = node
            parent.lru.append(node)  # global order = recency order among siblings
            trie.global_lru[node] = None
            nodes.append(node)
        stale = Node(0, None)  # version 1: a reference stored with version 0 is stale forever
        for i, key in enumerate(content.request_ids):
            st = MatchState()
            st.epoch = int(content.state_epoch[i])
            st.processed_total_len = int(content.state_processed_len[i])
            refs = content.state_refs[i, :int(content.state_count[i])].tolist()
            st.anchors = [None if r == -1 else (stale, 0) if r == -2 else (nodes[r], 1)
                          for r in refs]
            backend.states[key] = st
        return backend

    def check_integrity(self) -> None:
        """Raise :class:`~ngramspec.errors.IntegrityError` if an invariant is broken."""
        from .integrity import check_reference

        check_reference(self)
