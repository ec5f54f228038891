"""``NgramCache``: the public n-gram drafter (argument checking, packing, lock, backend)."""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Sequence
from typing import Any, Hashable

import numpy as np

from .config import NgramConfig
from .corpora import Corpora
from .drafts import DraftBatch
from .errors import BackgroundInsertError

__all__ = ["NgramCache", "BACKENDS"]

BACKENDS = ("numba", "reference")

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _out_of_int32(items: list, name: str) -> ValueError:
    bad = next(t for t in items if not _INT32_MIN <= int(t) <= _INT32_MAX)
    return ValueError(f"{name} holds a token id outside int32 [{_INT32_MIN}, {_INT32_MAX}]: "
                      f"{int(bad)}")


def _as_sequence(seq: Any, name: str) -> np.ndarray:
    """One 1-D sequence of token ids as an int32 array; a clear error otherwise."""
    if isinstance(seq, np.ndarray) or (hasattr(seq, "__array__")
                                       and not isinstance(seq, (str, bytes))):
        arr = np.asarray(seq)
        if arr.ndim != 1:
            deeper = " (nesting deeper than a batch of sequences)" if arr.ndim > 1 else ""
            raise ValueError(f"{name} must be a 1-D sequence of token ids, got an array of "
                             f"shape {arr.shape}{deeper}")
    elif isinstance(seq, (str, bytes, bytearray)) or not isinstance(seq, Sequence):
        raise TypeError(f"{name} must be a 1-D sequence of integer token ids (list, tuple, "
                        f"range or integer array), got {type(seq).__name__}")
    else:
        items = list(seq)
        # Fast path: plain Python ints within int32 (type() excludes bool, a subclass of int).
        if all(type(t) is int for t in items) and (
                not items or (_INT32_MIN <= min(items) and max(items) <= _INT32_MAX)):
            return np.array(items, dtype=np.int32)
        for t in items:
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"{name} must hold integer token ids, found "
                                f"{type(t).__name__} {t!r}")
        try:
            arr = np.asarray(items, dtype=np.int64) if items else np.zeros(0, np.int64)
        except OverflowError:  # Python ints beyond int64
            raise _out_of_int32(items, name) from None
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
            hint = (" (a 1-D array is one sequence: wrap it as [array])" if batch.ndim == 1
                    else "")
            raise ValueError(f"{name} as an array must be 2-D (batch, length), got shape "
                             f"{batch.shape}{hint}")
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
    if isinstance(total_lens, np.ndarray):
        lens = total_lens
    elif isinstance(total_lens, (str, bytes)) or not isinstance(total_lens, Sequence):
        raise TypeError(f"total_lens must be a 1-D sequence of ints (list, tuple or integer "
                        f"array), got {type(total_lens).__name__}")
    else:
        items = list(total_lens)
        for i, t in enumerate(items):
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"total_lens[{i}] must be an integer, got "
                                f"{type(t).__name__} {t!r}")
        try:
            lens = np.asarray(items, dtype=np.int64) if items else np.zeros(0, np.int64)
        except OverflowError:
            raise ValueError("total_lens values must fit in int64") from None
    if lens.ndim != 1 or (lens.size and lens.dtype.kind not in "iu"):
        raise TypeError(f"total_lens must be a 1-D sequence of integers, got dtype "
                        f"{lens.dtype} and shape {lens.shape}")
    if lens.size != n:
        raise ValueError(f"total_lens has {lens.size} values for {n} contexts")
    if lens.size and lens.dtype.kind == "u" and lens.max() > np.iinfo(np.int64).max:
        raise ValueError("total_lens values must fit in int64")
    return lens.astype(np.int64, copy=False)


def _as_request_ids(request_ids: Any) -> list[Hashable]:
    """``request_ids`` as a list of plain ``str``/``int`` keys; a clear error otherwise."""
    if isinstance(request_ids, (str, bytes)) or not isinstance(
            request_ids, (Sequence, np.ndarray)) or (
            isinstance(request_ids, np.ndarray) and request_ids.ndim != 1):
        what = (f"an array of shape {request_ids.shape}" if isinstance(request_ids, np.ndarray)
                else type(request_ids).__name__)
        raise TypeError(f"request_ids must be a 1-D sequence of str or int ids, got {what}")
    return [_as_request_id(r, i) for i, r in enumerate(request_ids)]


def _as_request_id(rid: Any, i: int) -> Hashable:
    if isinstance(rid, (bool, np.bool_)) or not isinstance(rid, (str, int, np.integer)):
        raise TypeError(f"request_ids[{i}] must be a str or an int, got {type(rid).__name__}")
    return int(rid) if isinstance(rid, (int, np.integer)) else str(rid)


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
    external_sam_budget, external_corpus_max_tokens
        External corpora (SGLang 0.5.23; off by default), see :meth:`add_corpus`.
    index_prompt, exact_counts, local_index, min_token_prob, max_spec_factor, min_expected_accept
        Options beyond SGLang, all off by default; see :class:`NgramConfig`.  The first three
        are :class:`Drafter` policies; the last three tune ``match_type="ADAPTIVE"``, whose
        matching is stateless (``request_ids``/``total_lens`` are checked and not used).
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
                 index_prompt: bool | None = None, exact_counts: bool | None = None,
                 local_index: bool | None = None, min_token_prob: float | None = None,
                 max_spec_factor: float | None = None,
                 min_expected_accept: float | None = None,
                 external_sam_budget: int | None = None,
                 external_corpus_max_tokens: int | None = None,
                 config: NgramConfig | None = None, backend: str = "numba") -> None:
        options = {k: v for k, v in dict(
            max_trie_depth=max_trie_depth, min_bfs_breadth=min_bfs_breadth,
            max_bfs_breadth=max_bfs_breadth, draft_token_num=draft_token_num,
            match_type=match_type, capacity=capacity, profile=profile,
            branch_length=branch_length, min_match_window_size=min_match_window_size,
            max_match_window_size=max_match_window_size, index_prompt=index_prompt,
            exact_counts=exact_counts, local_index=local_index, min_token_prob=min_token_prob,
            max_spec_factor=max_spec_factor,
            min_expected_accept=min_expected_accept, external_sam_budget=external_sam_budget,
            external_corpus_max_tokens=external_corpus_max_tokens).items() if v is not None}
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
        self._corpora = Corpora(config, backend)
        # Background inserts (insert(wait=False)): FIFO queue, one worker thread at a time,
        # counters of batches queued and finished, errors kept for the next caller.
        self._queue: collections.deque = collections.deque()
        self._queue_cond = threading.Condition()
        self._queued = self._done = 0
        self._worker_running = False
        self._errors: list[BaseException] = []

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
        if self._config.external_sam_budget:  # the corpus kernels too
            scratch.add_corpus("warmup", [[1, 2, 1]])
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
        """Trie nodes in use, root included (after queued inserts have run)."""
        self.synchronize()
        return self._backend.node_count

    def insert(self, sequences, *, wait: bool = True) -> None:
        """Insert a batch of token sequences, each in full and in batch order (SGLang's
        ``batch_put`` followed by ``synchronize``).  An empty sequence is a no-op.

        Parameters
        ----------
        sequences : list of 1-D int sequences, or 2-D int array
            Token ids within int32.  Checked here, in the caller's thread, whatever ``wait``.
        wait : bool, default True
            ``False`` queues the batch for a background thread (SGLang's insert thread) and
            returns at once; queued batches are inserted one at a time in the order they were
            queued.  Every other call (``match``, ``erase``, ``reset``, ``save``,
            ``check_integrity``, ``len``, a waiting ``insert``) first waits until every batch
            queued before it has been inserted, so results never depend on the thread.
            Errors of a background insert are raised by that next call or by
            :meth:`synchronize` (as :class:`~ngramspec.errors.BackgroundInsertError`).

        Examples
        --------
        >>> cache = NgramCache(capacity=1000, draft_token_num=4)
        >>> cache.insert([[1, 2, 3, 4]], wait=False)
        >>> cache.synchronize()
        >>> cache.match([[1, 2]]).tokens
        array([[2, 3, 4, 0]], dtype=int32)
        """
        if not isinstance(wait, (bool, np.bool_)):
            raise TypeError(f"wait must be a bool, got {type(wait).__name__} {wait!r}")
        batch = _as_batch(sequences, "sequences")
        if not wait:
            self._enqueue(batch)
            return
        self.synchronize()
        with self._lock:
            self._backend.insert(batch)

    def match(self, contexts, request_ids: Sequence[Any] | None = None,
              total_lens: Sequence[int] | None = None) -> DraftBatch:
        """Draft a token tree for each context (SGLang's ``batch_get``).

        Waits first for inserts queued with ``wait=False`` (as SGLang's worker synchronizes
        before every draft).

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
            the tail of (``total_lens[i] >= len(contexts[i])``).  A length smaller than the
            one a request's state saw last rebuilds the state (as SGLang does).  Without ids
            it is still checked, then ignored; ignored in profile ``"sglang-0.5.9"``.
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
            keys = _as_request_ids(request_ids)
            if len(keys) != len(batch):
                raise ValueError(f"request_ids has {len(keys)} ids for {len(batch)} contexts")
            if len(set(keys)) != len(keys):
                raise ValueError("request_ids holds duplicates; each request in a batch needs "
                                 "its own id (SGLang would silently share one match state)")
            if total_lens is None:
                raise ValueError("total_lens is required with request_ids: the full length of "
                                 "each request's sequence drives its match state")
        if total_lens is not None and self._config.stateful:
            lens = _as_lengths(total_lens, len(batch))
            sizes = np.fromiter((c.size for c in batch), np.int64, len(batch))
            short = np.flatnonzero(lens < sizes)
            if short.size:
                i = int(short[0])
                raise ValueError(f"total_lens[{i}] = {lens[i]} is shorter than "
                                 f"contexts[{i}] ({sizes[i]} tokens)")
            if keys is None:
                lens = None  # checked, and meaningless without ids
        if self._config.match_type == "ADAPTIVE":
            return self._match_adaptive(batch)
        self.synchronize()
        with self._lock:
            if self._corpora.active:
                tokens, mask, num_drafts = self._corpora.match(self._backend, batch, keys, lens)
            else:
                tokens, mask, num_drafts = self._backend.match(batch, keys, lens)
        return DraftBatch(tokens, mask, num_drafts)

    # What Drafter's options beyond SGLang use (inputs already validated) --------------------

    def _match_adaptive(self, batch: list[np.ndarray],
                        local: Sequence["NgramCache | None"] | None = None) -> DraftBatch:
        """ADAPTIVE drafts; ``local[b]``: request b's own cache, searched before this one."""
        self.synchronize()
        locals_ = None if local is None else [None if c is None else c._backend for c in local]
        with self._lock:
            tokens, mask, num, probs = self._backend.match_adaptive(batch, locals_)
        return DraftBatch(tokens, mask, num, probs)

    def _insert_counted(self, sequences: list[np.ndarray], count_from: Sequence[int]) -> None:
        """Insert with exact counting: only positions ``>= count_from[s]`` of sequence s count."""
        self.synchronize()
        with self._lock:
            self._backend.insert_counted(sequences, count_from)

    def erase(self, request_ids: Sequence[Any]) -> None:
        """Forget the match states of these requests; unknown ids are a no-op."""
        keys = _as_request_ids(request_ids)
        self.synchronize()
        with self._lock:
            self._backend.erase(keys)

    def reset(self) -> None:
        """Empty the trie and forget every match state (after queued inserts have run).
        External corpora are kept, as SGLang's cache flush keeps them."""
        self.synchronize()
        with self._lock:
            self._backend.reset()

    # External corpora (SGLang 0.5.23; ngramspec.corpora) ------------------------------------

    def add_corpus(self, corpus_id: str, documents) -> int:
        """Load an external corpus: a suffix automaton over ``documents`` that every match
        then drafts from, with ``external_sam_budget`` nodes shared by the loaded corpora
        (SGLang's ``/add_external_corpus``).  Corpora survive :meth:`reset`.

        Parameters
        ----------
        corpus_id : str
            A new, non-empty id.
        documents : iterable of 1-D int sequences
            Token ids within int32, except ``INT32_MIN``: the separator SGLang puts between
            documents.  Empty documents are skipped.

        Returns
        -------
        int
            Tokens loaded, separators included (what :meth:`corpora` reports).

        Raises
        ------
        ValueError
            A duplicate id, no tokens, more tokens than ``external_corpus_max_tokens`` or
            than the loaded corpora leave of it (SGLang would truncate a corpus over the
            cap), a bad token, or ``external_sam_budget == 0``.  Nothing changes then.

        Examples
        --------
        >>> cache = NgramCache(max_trie_depth=4, max_bfs_breadth=3, draft_token_num=6,
        ...                    external_sam_budget=2)
        >>> cache.insert([[1, 2, 3, 4]])
        >>> cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]])
        10
        >>> cache.match([[1, 2]]).tokens
        array([[2, 5, 3, 4, 0, 0]], dtype=int32)
        >>> cache.corpora()
        {'docs': 10}
        """
        self.synchronize()
        with self._lock:
            return self._corpora.add(corpus_id, documents)

    def remove_corpus(self, corpus_id: str) -> None:
        """Unload a corpus; KeyError if no corpus has this id (SGLang accepts it silently)."""
        with self._lock:
            self._corpora.remove(corpus_id)

    def clear_corpora(self) -> None:
        """Unload every corpus (the trie is untouched)."""
        with self._lock:
            self._corpora.clear()

    def corpora(self) -> dict[str, int]:
        """``{corpus_id: tokens}`` of the loaded corpora, separators included, in SGLang's
        order (the one in which their trees are merged)."""
        with self._lock:
            return self._corpora.counts()

    # Background inserts ------------------------------------------------------------------

    def _enqueue(self, batch: list[np.ndarray]) -> None:
        # Copy: the caller may reuse its arrays once we return (int32 input is not copied).
        batch = [np.array(s, dtype=np.int32, copy=True) for s in batch]
        with self._queue_cond:
            self._queue.append(batch)
            self._queued += 1
            if not self._worker_running:
                self._worker_running = True
                threading.Thread(target=self._work, name="ngramspec-insert",
                                 daemon=True).start()

    def _work(self) -> None:
        """The insert thread: drains the queue in order, then exits (restarted on demand)."""
        while True:
            with self._queue_cond:
                if not self._queue:
                    self._worker_running = False
                    return
                batch = self._queue.popleft()
            error = None
            try:
                with self._lock:
                    self._backend.insert(batch)
            except BaseException as e:  # kept for the caller, never lost
                error = e
            with self._queue_cond:
                if error is not None:
                    self._errors.append(error)
                self._done += 1  # only now is this batch FINISHED
                self._queue_cond.notify_all()

    def synchronize(self) -> None:
        """Wait until every insert queued (``wait=False``) before this call has finished.

        Unlike SGLang 0.5.9's ``synchronize``, which returned once the queue was empty while
        the last insert could still be running, this waits for the inserts themselves.  If
        a background insert failed, raises :class:`~ngramspec.errors.BackgroundInsertError`
        (once) with the first failure as its cause; the batches queued after it were still
        inserted.
        """
        with self._queue_cond:
            target = self._queued
            while self._done < target:
                self._queue_cond.wait()
            errors, self._errors = self._errors, []
        if errors:
            raise BackgroundInsertError(
                f"{len(errors)} background insert(s) failed; the first: "
                f"{type(errors[0]).__name__}: {errors[0]}") from errors[0]

    # Integrity and persistence -----------------------------------------------------------

    def check_integrity(self) -> None:
        """Verify the backend's internal invariants; raise
        :class:`~ngramspec.errors.IntegrityError` naming the first broken one.

        Checks parent/child links, child recency lists, the child lookup table, frequency
        and global LRU order (parents ahead of children, so eviction only removes leaves),
        the free list, the node count against ``capacity`` and the match states.  Walks the
        whole trie in Python: a testing and debugging aid, not for every step in serving.

        Examples
        --------
        >>> cache = NgramCache(max_trie_depth=4, capacity=5)
        >>> cache.insert([[1, 2, 3, 4, 5, 6, 7]])
        >>> cache.check_integrity()
        >>> len(cache)
        5
        """
        self.synchronize()
        with self._lock:
            self._backend.check_integrity()

    def save(self, path: str | os.PathLike) -> None:
        """Write the trie and the match states to ``path`` (format: :mod:`ngramspec.persist`).

        Atomic: the file appears complete at ``path`` or not at all; a failure mid-write
        leaves a previous file there untouched.  A cache loaded from it continues exactly as
        this one would (same drafts for the same future calls, stateful matches included),
        on either backend.  External corpora are not written (they are rebuilt from their
        documents): add them again to the loaded cache.

        Examples
        --------
        >>> import os, tempfile
        >>> cache = NgramCache(capacity=1000, draft_token_num=4)
        >>> cache.insert([[1, 2, 3, 4]])
        >>> path = os.path.join(tempfile.mkdtemp(), "trie.npz")
        >>> cache.save(path)
        >>> NgramCache.load(path).match([[1, 2]]).tokens
        array([[2, 3, 4, 0]], dtype=int32)
        """
        from .persist import save_cache

        save_cache(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, backend: str | None = None,
             config: NgramConfig | None = None) -> "NgramCache":
        """A cache read from a file written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike
        backend : {"numba", "reference"}, optional
            Default: the backend that saved the file.
        config : NgramConfig, optional
            The configuration the caller expects; a file with another one raises
            :class:`~ngramspec.errors.CacheFileError`.

        Raises
        ------
        CacheFileError
            Truncated, corrupted, of an unknown format version, or of another ``config``.
        """
        from .persist import load_cache

        return load_cache(path, backend=backend, config=config)
