"""The backend-independent content of a cache: what decides its future drafts, nothing else.

Each backend converts itself to and from this form (``to_canonical`` / ``from_canonical``);
:mod:`ngramspec.cache.persist` writes and reads it and knows nothing of the backends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

import numpy as np

__all__ = ["CanonicalContent"]


@dataclass
class CanonicalContent:
    """A trie and its match states, independent of slot layout and history.

    Attributes
    ----------
    epoch : int
        The trie's reset counter.
    node_token, node_parent, node_freq : ndarray of int32, shape (N,)
        The non-root nodes in global LRU order, most recently touched first.  ``node_parent``
        is the parent's index in these arrays (-1 = root), always smaller than the node's own.
        Each node's children keep this order in their recency list.
    request_ids : list of str or int
        The ids with a match state, in the order of the ``state_*`` arrays.
    state_epoch, state_processed_len : ndarray of int64, shape (S,)
    state_count : ndarray of int32, shape (S,)
    state_refs : ndarray of int32, shape (S, trie depth)
        SGLang's ``MatchState`` per id: epoch, processed total length, number of suffix
        references and, for suffix length ``d``, ``state_refs[s, d - 1]`` = the node's index,
        -1 = absent, -2 = stale (the next match of that request rebuilds its state).
    corpus_ids : list of str
        The loaded external corpora in SGLang's corpus order (empty: none).
    corpus_streams : list of ndarray of int32
        Per corpus, its token stream (documents joined by the separator ``INT32_MIN``), from
        which its automaton is rebuilt.
    corpus_table : tuple of int
        ``(bucket count, next resize)`` of the corpus table (``CorpusOrder``): with the
        order, what decides where later corpora go.
    """

    epoch: int
    node_token: np.ndarray
    node_parent: np.ndarray
    node_freq: np.ndarray
    request_ids: list[Hashable]
    state_epoch: np.ndarray
    state_processed_len: np.ndarray
    state_count: np.ndarray
    state_refs: np.ndarray
    corpus_ids: list[str] = field(default_factory=list)
    corpus_streams: list[np.ndarray] = field(default_factory=list)
    corpus_table: tuple[int, int] = (1, 0)

    @staticmethod
    def no_states(depth: int) -> dict[str, np.ndarray]:
        """The ``state_*`` arrays of a cache without match states."""
        return dict(state_epoch=np.zeros(0, np.int64), state_processed_len=np.zeros(0, np.int64),
                    state_count=np.zeros(0, np.int32), state_refs=np.zeros((0, depth), np.int32))
