"""``NgramCache``: the public n-gram drafter (argument checking, packing, lock, backend)."""

from __future__ import annotations

import threading
from typing import Any, Hashable, Sequence

import numpy as np

from .config import NgramConfig
from .drafts import DraftBatch

__all__ = ["NgramCache", "BACKENDS"]

BACKENDS = ("numba", "reference")

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _as_sequence(seq: Any, name: str) -> np.ndarray:
    """One 1-D sequence of token ids as a fresh int32 array; a clear error otherwise."""
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise TypeError(f"{name} must be a 1-D sequence of integer token ids, "
                        f"got {type(seq).__name__}")
    if isinstance(seq, np.ndarray):
        arr = seq
    else:
        items = list(seq)
        for t in items:
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"{name} must hold integer token ids, found "
                                f"{type(t).__name__} {t!r}")
        arr = np.asarray(items, dtype=np.int64) if items else np.zeros(0, np.int64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got an array of shape {arr.shape} (nesting "
                         "deeper than a batch of sequences)")
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if arr.size and kind not in "iu":
        raise TypeError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    # Only wide integer dtypes can hold ids outside int32.
    if arr.size and ((kind == "i" and size > 4) or (kind == "u" and size >= 4)) and (
            arr.min() < _INT32_MIN or arr.max() > _INT32_MAX):
        raise ValueError(f"{name} holds token ids outside int32 "
                         f"[{_INT32_MIN}, {_INT32_MAX}]: min {arr.min()}, max {arr.max()}")
    # No copy for int32 input: the backends copy while packing and never keep the array.
    return arr.astype(np.int32, copy=False)


def _as_batch(batch: Any, name: str) -> list[np.ndarray]:
    """A batch (list of 1-D sequences, or a 2-D array) as a list of int32 arrays."""
    if isinstance(batch, np.ndarray):
        if batch.ndim != 2:
            raise ValueError(f"{name} as an array must be 2-D (batch, length), got shape "
                             f"{batch.shape}")
        return [_as_sequence(row, f"{name}[{i}]") for i, row in enumerate(batch)]
    if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
        raise TypeError(f"{name} must be a list of 1-D integer sequences or a 2-D integer "
                        f"array, got {type(batch).__name__}")
    if batch and all(isinstance(t, (int, np.integer)) for t in batch):
        raise TypeError(f"{name} must be a batch (a list of sequences), got a flat sequence "
                        f"of ints; wrap it as [{name}]")
    return [_as_sequence(seq, f"{name}[{i}]") for i, seq in enumerate(batch)]


def _as_lengths(total_lens: Any, n: int) -> np.ndarray:
    """``total_lens`` as an int64 array of ``n`` values; a clear error otherwise."""
    if isinstance(total_lens, (str, bytes)) or not hasattr(total_lens, "__len__"):
        raise TypeError(f"total_lens must be a 1-D sequence of ints, got "
                        f"{type(total_lens).__name__}")
    try:
        lens = np.asarray(total_lens)
    except (ValueError, OverflowError) as e:
        raise TypeError(f"total_lens must be a 1-D sequence of ints: {e}") from None
    if lens.ndim != 1 or (lens.size and lens.dtype.kind not in "iu"):
        raise TypeError(f"total_lens must be a 1-D sequence of integers, got dtype "
                        f"{lens.dtype} and shape {lens.shape}")
    if lens.size != n:
        raise ValueError(f"total_lens has {lens.size} values for {n} contexts")
    if lens.size and lens.dtype.kind == "u" and lens.max() > np.iinfo(np.int64).max:
        raise ValueError("total_lens values must fit in int64")
    return lens.astype(np.int64, copy=False)


def _as_request_id(rid: Any, i: int) -> Hashable:
    if isinstance(rid, (bool, np.bool_)) or not isinstance(rid, (str, int, np.integer)):
        raise TypeError(f"request_ids[{i}] must be a str or an int, got {type(rid).__name__}")
    return int(rid) if isinstance(rid, np.integer) else rid


class NgramCache:
    """SGLang's NGRAM drafter: a trie of recent n-grams and per-request match states.

    Every option is keyword-only; the defaults are SGLang's server defaults.  Pass either the
    individual options or ``config=``, not both.  By default SGLang 0.5.23 is reproduced;
    ``profile="sglang-0.5.9"`` gives the window era (``branch_length``, match windows,
    stateless matching; see :class:`NgramConfig`).

    Parameters
    ----------
    max_trie_depth, min_bfs_breadth, max_bfs_breadth, draft_token_num, match_type, capacity
        See :class:`NgramConfig`.
    profile, branch_length, min_match_window_size, max_match_window_size
        See :class:`NgramConfig`; the last three belong to ``profile="sglang-0.5.9"``.
    config : NgramConfig, optional
        A complete configuration instead of the individual options.
    backend : {"numba", "reference"}
        ``"numba"`` (default): flat-array trie and compiled kernels, one kernel call per batch;
        the first cache compiles them (cached on disk afterwards).  ``"reference"``: the
        readable pure-Python model.  Both give identical results.

    Examples
    --------
    >>> import ngramspec as ns
    >>> cache = ns.NgramCache(max_trie_depth=12, max_bfs_breadth=8, draft_token_num=8,
    ...                       capacity=100_000)
    >>> cache.insert([list(range(1, 11)), [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]])
    >>> cache.match([[1, 2, 3]]).tokens
    array([[ 3,  4, 44,  5, 55,  6, 66, 77]], dtype=int32)
    >>> d = cache.match([[3, 44]], request_ids=["req-1"], total_lens=[2])
    >>> d.tokens[0].tolist(), int(d.num_drafts[0])
    ([44, 55, 66, 77, 88, 99, 100, 0], 6)

    The window-era profile (SGLang 0.5.9), with that library demo's settings:

    >>> old = ns.NgramCache(profile="sglang-0.5.9", branch_length=12, max_match_window_size=10,
    ...                     max_bfs_breadth=8, draft_token_num=8, capacity=100_000)
    >>> old.insert([list(range(1, 11)), [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]])
    >>> old.match([[1, 2, 3]]).tokens
    array([[ 3,  4, 44,  5, 55,  6, 66, 77]], dtype=int32)
    """

    def __init__(self, *, max_trie_depth: int | None = None, min_bfs_breadth: int | None = None,
                 max_bfs_breadth: int | None = None, draft_token_num: int | None = None,
                 match_type: str | None = None, capacity: int | None = None,
                 profile: str | None = None, branch_length: int | None = None,
                 min_match_window_size: int | None = None,
                 max_match_window_size: int | None = None,
                 config: NgramConfig | None = None, backend: str = "numba") -> None:
        options = {k: v for k, v in dict(
            max_trie_depth=max_trie_depth, min_bfs_breadth=min_bfs_breadth,
            max_bfs_breadth=max_bfs_breadth, draft_token_num=draft_token_num,
            match_type=match_type, capacity=capacity, profile=profile,
            branch_length=branch_length, min_match_window_size=min_match_window_size,
            max_match_window_size=max_match_window_size).items() if v is not None}
        if config is not None:
            if options:
                raise ValueError(f"pass either config= or individual options, not both "
                                 f"(got config and {sorted(options)})")
            if not isinstance(config, NgramConfig):
                raise TypeError(f"config must be an NgramConfig, got {type(config).__name__}")
        else:
            config = NgramConfig(**options)
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self._config = config
        self._backend_name = backend
        self._lock = threading.Lock()
        self._backend = self._make_backend()

    def _make_backend(self):
        if self._backend_name == "numba":
            from .engine import EngineBackend  # imports numba: only when a cache needs it
            return EngineBackend(self._config)
        from .reference import ReferenceBackend
        return ReferenceBackend(self._config)

    def warmup(self) -> "NgramCache":
        """Compile (or load from the on-disk cache) the kernels now, not on the first real call.

        Runs one insert and one match on a throwaway cache of the same configuration; this
        cache is left untouched.  Returns ``self``.
        """
        scratch = NgramCache(config=self._config.replace(capacity=self._config.trie_depth + 1),
                             backend=self._backend_name)
        scratch.insert([[1, 2, 1]])
        scratch.match([[1, 2]], request_ids=[0], total_lens=[2])
        scratch.match([[1, 2]])
        return self

    @property
    def config(self) -> NgramConfig:
        return self._config

    @property
    def backend(self) -> str:
        return self._backend_name

    def __repr__(self) -> str:
        return f"NgramCache(config={self._config!r}, backend={self._backend_name!r})"

    def __len__(self) -> int:
        """Trie nodes in use, root included."""
        return self._backend.node_count

    def insert(self, sequences) -> None:
        """Insert a batch of token sequences, each in full and in batch order (SGLang's
        ``batch_put`` followed by ``synchronize``).  An empty sequence is a no-op."""
        batch = _as_batch(sequences, "sequences")
        with self._lock:
            self._backend.insert(batch)

    def match(self, contexts, request_ids: Sequence[Any] | None = None,
              total_lens: Sequence[int] | None = None) -> DraftBatch:
        """Draft a token tree for each context (SGLang's ``batch_get``).

        Parameters
        ----------
        contexts : list of 1-D int sequences, or 2-D int array
            The tail of each request's sequence (SGLang sends the last ``max_trie_depth``
            tokens; 0.5.9 the last ``max_match_window_size``); the last token is the root of
            its tree.  Must be non-empty.
        request_ids : sequence of str or int, optional
            With ids, matching is stateful per id (SGLang's ``MatchState``), which can differ
            from stateless matching when the trie changed since the state was computed.
            Without, every context is matched afresh.  In profile ``"sglang-0.5.9"`` matching
            is always stateless: ids are accepted and ignored (not even checked).
        total_lens : sequence of int
            Required with ``request_ids``: the full length of the sequence each context is
            the tail of (``total_lens[i] >= len(contexts[i])``).  Ignored without ids, and
            ignored in profile ``"sglang-0.5.9"``.
        """
        batch = _as_batch(contexts, "contexts")
        if not batch:
            raise ValueError("contexts must hold at least one context, got an empty batch")
        for i, ctx in enumerate(batch):
            if ctx.size == 0:
                raise ValueError(f"contexts[{i}] is empty; a context needs at least one token "
                                 "(its last token is the root of the draft tree)")
        keys = lens = None
        if request_ids is not None and self._config.stateful:
            if isinstance(request_ids, (str, bytes)) or not isinstance(
                    request_ids, (Sequence, np.ndarray)):
                raise TypeError("request_ids must be a sequence of str or int ids, one per "
                                f"context, got {type(request_ids).__name__}")
            keys = [_as_request_id(r, i) for i, r in enumerate(request_ids)]
            if len(keys) != len(batch):
                raise ValueError(f"request_ids has {len(keys)} ids for {len(batch)} contexts")
            if len(set(keys)) != len(keys):
                raise ValueError("request_ids holds duplicates; each request in a batch needs "
                                 "its own id (SGLang would silently share one match state)")
            if total_lens is None:
                raise ValueError("total_lens is required with request_ids: the full length of "
                                 "each request's sequence drives its match state")
            lens = _as_lengths(total_lens, len(batch))
            sizes = np.fromiter((c.size for c in batch), np.int64, len(batch))
            short = np.flatnonzero(lens < sizes)
            if short.size:
                i = int(short[0])
                raise ValueError(f"total_lens[{i}] = {lens[i]} is shorter than "
                                 f"contexts[{i}] ({sizes[i]} tokens)")
        with self._lock:
            tokens, mask, num_drafts = self._backend.match(batch, keys, lens)
        return DraftBatch(tokens, mask, num_drafts)

    def erase(self, request_ids: Sequence[Any]) -> None:
        """Forget the match states of these requests; unknown ids are a no-op."""
        if isinstance(request_ids, (str, bytes, int)) or not isinstance(
                request_ids, (Sequence, np.ndarray)):
            raise TypeError("request_ids must be a sequence of str or int ids, got "
                            f"{type(request_ids).__name__}")
        keys = [_as_request_id(r, i) for i, r in enumerate(request_ids)]
        with self._lock:
            self._backend.erase(keys)

    def reset(self) -> None:
        """Empty the trie and forget every match state."""
        with self._lock:
            self._backend.reset()
