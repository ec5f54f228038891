"""``NgramCache``: SGLang 0.5.9's window-era drafter class, backed by ngramspec.

SGLang 0.5.9's NGRAM worker drafts through ``sglang.srt.speculative.cpp_ngram.ngram_cache.
NgramCache``: constructor keywords ``branch_length, min_match_window_size,
max_match_window_size, min_bfs_breadth, max_bfs_breadth, draft_token_num, match_type,
capacity``; ``batch_put``, ``synchronize``, ``reset`` and a stateless ``batch_get(batch_tokens)``
returning flat int64 token and mask arrays, the debugging helpers ``leaf_paths_from_mask``
and ``debug_result``, and the attributes ``cache``, ``default_mask`` and ``draft_token_num``.
This class has the same, over
:class:`ngramspec.NgramCache` with ``profile="sglang-0.5.9"``; ``config=`` takes any
configuration of that profile (every one is SGLang-exact: the options beyond SGLang exist for
0.5.23 only).  No launcher is offered: 0.5.9 servers predate SGLang's plugin mechanism;
replace the name in the worker module yourself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..cache import NgramCache as _Cache
from ..config import NgramConfig
from .sglang_shared import (EMPTY, leaf_paths_from_mask, log_draft_trees, pack_windows,
                            resolve_config)

__all__ = ["NgramCache"]

logger = logging.getLogger(__name__)


class NgramCache:
    """SGLang 0.5.9's ``NgramCache`` (same keywords, methods and outputs), backed by ngramspec.

    Examples
    --------
    >>> from ngramspec.integrations.sglang_legacy import NgramCache
    >>> cache = NgramCache(branch_length=12, max_match_window_size=10, draft_token_num=8)
    >>> cache.batch_put([list(range(1, 11)), [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]])
    >>> cache.synchronize()
    >>> tokens, mask = cache.batch_get([[1, 2, 3]])
    >>> tokens.tolist(), tokens.dtype, mask.shape
    ([3, 4, 44, 5, 55, 6, 66, 77], dtype('int64'), (64,))
    """

    def __init__(self, branch_length: int = 18, min_match_window_size: int = 1,
                 max_match_window_size: int = 10, min_bfs_breadth: int = 1,
                 max_bfs_breadth: int = 8, draft_token_num: int = 8, match_type: str = "BFS",
                 capacity: int = 1_000_000, *,
                 config: NgramConfig | str | os.PathLike | None = None,
                 backend: str = "numba") -> None:
        given = {"branch_length": branch_length,
                 "min_match_window_size": min_match_window_size,
                 "max_match_window_size": max_match_window_size,
                 "min_bfs_breadth": min_bfs_breadth, "max_bfs_breadth": max_bfs_breadth,
                 "draft_token_num": draft_token_num, "match_type": match_type,
                 "capacity": capacity}
        if config is None:
            cfg = NgramConfig(profile="sglang-0.5.9", **given)
        else:
            cfg = resolve_config(config)
            if cfg.profile != "sglang-0.5.9":
                raise ValueError(f"config has profile {cfg.profile!r}; SGLang 0.5.9's worker "
                                 "runs profile 'sglang-0.5.9' configurations")
            for name in ("draft_token_num", "max_match_window_size"):
                if given[name] != getattr(cfg, name):
                    raise ValueError(f"the worker passed {name}={given[name]} but the config "
                                     f"has {getattr(cfg, name)}: the worker sizes its buffers "
                                     "and windows by it; start the server with the config's")
        self._config = cfg
        self.draft_token_num = cfg.draft_token_num
        #: SGLang's attribute of the same name (a 1 x 1 int64 array of ones; its worker never
        #: reads it).
        self.default_mask = np.ones((1, 1), dtype=np.int64)
        self._cache = _Cache(config=cfg, backend=backend).warmup()

    @property
    def config(self) -> NgramConfig:
        """The configuration this drafter runs."""
        return self._config

    @property
    def cache(self) -> _Cache:
        """The trie, as SGLang's attribute of this name holds its C++ one: here the
        :class:`ngramspec.NgramCache` that drafts (its methods are ngramspec's)."""
        return self._cache

    def batch_put(self, batch_tokens: Sequence[Sequence[int]]) -> None:
        """Queue the windows for the insert thread; returns at once."""
        packed = pack_windows(batch_tokens)
        if packed is None:
            self._cache.insert(batch_tokens, wait=False)
        else:
            self._cache.port.insert_packed(*packed, wait=False)

    def synchronize(self) -> None:
        """Wait until every queued window is in the trie."""
        self._cache.synchronize()

    def reset(self) -> None:
        """Empty the trie."""
        self._cache.reset()

    def batch_get(self, batch_tokens: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Draft a tree per context, statelessly: flat int64 ``(tokens, mask)``."""
        if not len(batch_tokens):
            return EMPTY.copy(), EMPTY.copy()
        d = self._cache.match(batch_tokens)
        return d.tokens.reshape(-1).astype(np.int64), d.mask.reshape(-1).astype(np.int64)

    def leaf_paths_from_mask(self, tokens: Sequence[Any], tree_mask: Any) -> list[list[Any]]:
        """The token paths of a draft tree's leaves (see
        :func:`ngramspec.integrations.sglang.leaf_paths_from_mask`).

        Examples
        --------
        >>> NgramCache(draft_token_num=3).leaf_paths_from_mask(
        ...     [10, 20, 30], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
        [[10, 20, 30]]
        """
        return leaf_paths_from_mask(tokens, tree_mask)

    def debug_result(self, decoding_ids: Any, decoding_masks: Any, tokenizer: Any = None
                     ) -> None:
        """Log the trees of a :meth:`batch_get` and their leaf paths at INFO, as SGLang's does
        (see :meth:`ngramspec.integrations.sglang.NgramCorpus.debug_result`); the records go
        to this module's logger."""
        log_draft_trees(logger, self.draft_token_num, decoding_ids, decoding_masks, tokenizer)
