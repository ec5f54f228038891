"""``NgramCache``: the public n-gram drafter (the facade: lock, backend choice, matching;
its insert thread, corpus calls and save/load are mixins: :mod:`~ngramspec.cache.inserts`,
:mod:`~ngramspec.cache.corpus_calls`, :mod:`~ngramspec.cache.saving`).  Input checks live in :mod:`ngramspec._validate`, the file format in
:mod:`ngramspec.cache.persist`, the algorithms in the backends (``engine/``, ``reference/``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Hashable, Mapping

import numpy as np

from .port import ServingPort
from .. import _validate as v
from ..config import NgramConfig
from ..drafts import DraftBatch
from .backends import BACKENDS, backend_class
from .corpora import Corpora, read_corpus
from .corpus_calls import CorpusCalls
from .inserts import BackgroundInserts
from .saving import Saving

__all__ = ["NgramCache", "BACKENDS", "cache_from_sglang_args"]


class NgramCache(BackgroundInserts, CorpusCalls, Saving):
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
    index_prompt, exact_counts, local_index, shared_prompt_window, min_token_prob, max_spec_factor
    min_expected_accept, shared_pseudo_count, calibrated_estimates, chain
        Options beyond SGLang, all off by default; see :class:`NgramConfig`.  The first four
        and ``chain`` are :class:`Drafter` policies (``match`` returns trees;
        :meth:`DraftBatch.chains` cuts them); the others tune ``match_type="ADAPTIVE"``, whose
        matching is stateless (``request_ids``/``total_lens`` are checked and not used).
    prompt_lookup_min, prompt_lookup_max, num_speculative_tokens
        Profile ``vllm-0.33`` (vLLM's n-gram proposer), which no cache runs (it has no
        trie): refused, naming :func:`simulate`.
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
                 local_index: bool | None = None, shared_prompt_window: int | None = None,
                 min_token_prob: float | None = None,
                 max_spec_factor: float | None = None,
                 min_expected_accept: float | str | None = None,
                 shared_pseudo_count: float | None = None,
                 external_sam_budget: int | None = None,
                 external_corpus_max_tokens: int | None = None,
                 calibrated_estimates: bool | None = None, chain: bool | None = None,
                 prompt_lookup_min: int | None = None, prompt_lookup_max: int | None = None,
                 num_speculative_tokens: int | None = None,
                 config: NgramConfig | None = None, backend: str = "numba") -> None:
        options = {k: v for k, v in dict(
            max_trie_depth=max_trie_depth, min_bfs_breadth=min_bfs_breadth,
            max_bfs_breadth=max_bfs_breadth, draft_token_num=draft_token_num,
            match_type=match_type, capacity=capacity, profile=profile,
            branch_length=branch_length, min_match_window_size=min_match_window_size,
            max_match_window_size=max_match_window_size, index_prompt=index_prompt,
            exact_counts=exact_counts, local_index=local_index,
            shared_prompt_window=shared_prompt_window, min_token_prob=min_token_prob,
            max_spec_factor=max_spec_factor,
            min_expected_accept=min_expected_accept, external_sam_budget=external_sam_budget,
            external_corpus_max_tokens=external_corpus_max_tokens,
            calibrated_estimates=calibrated_estimates, chain=chain,
            prompt_lookup_min=prompt_lookup_min, prompt_lookup_max=prompt_lookup_max,
            num_speculative_tokens=num_speculative_tokens,
            shared_pseudo_count=shared_pseudo_count).items() if v is not None}
        if config is not None:
            if options:
                raise ValueError(f"pass either config= or individual options, not both "
                                 f"(got config and {sorted(options)})")
            config = v.check_config(config, default=False)
        else:
            config = NgramConfig(**options)
        self._config = config
        self._backend_name = v.check_backend(backend, BACKENDS)
        # Read on every match: plain attributes, not properties of the config.
        self._stateful = config.stateful
        self._adaptive = config.mode.backend_call == "match_adaptive"
        self._plain_match = self._stateful and not self._adaptive  # ids and lengths are used
        # A backend of this class writes drafts into an output pool; checked per call (a
        # cache's backend may be replaced, e.g. by one that wraps it).
        cls = backend_class(self._backend_name)
        self._pooled_cls = cls if self._plain_match and cls.pooled else None
        self._lock = threading.Lock()
        self._backend = self._make_backend()
        self._corpora = Corpora(config, backend)
        self._init_inserts()
        #: The serving port: what the drafters serving from this cache may do beyond its
        #: public calls (:class:`~ngramspec.cache.port.ServingPort`).
        self.port = ServingPort(self)

    def _make_backend(self):
        return backend_class(self._backend_name)(self._config)

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
        one = np.array([1, 2], np.int32)
        scratch.match([[1, 2]], request_ids=[0], total_lens=[2])
        scratch.match([one], request_ids=[0], total_lens=[2])  # serving's forms, too
        scratch.match([one, one], request_ids=[0, 1], total_lens=[2, 2])
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

    def insert(self, sequences, *, wait: bool = True, count_from: Sequence[int] | None = None
               ) -> None:
        """Insert a batch of token sequences, each in full and in batch order (SGLang's
        ``batch_put`` followed by ``synchronize``).  An empty sequence is a no-op.

        Parameters
        ----------
        sequences : list of 1-D int sequences, or 2-D int array
            Token ids within int32: lists, NumPy arrays or torch tensors (a GPU tensor is
            copied to the host).  Negative ids are taken as SGLang's class takes them (hashed
            and drafted like any other): do not pad with ``-1``, pass sequences of their own
            lengths.  Checked here, in the caller's thread, whatever ``wait``.
        wait : bool, default True
            ``False`` queues the batch for a background thread (SGLang's insert thread) and
            returns at once; queued batches are inserted one at a time in the order they were
            queued.  Every other call (``match``, ``erase``, ``reset``, ``save``,
            ``check_integrity``, ``len``, a waiting ``insert``) first waits until every batch
            queued before it has been inserted, so results never depend on the thread.
            Errors of a background insert are raised by that next call or by
            :meth:`synchronize` (as :class:`~ngramspec.errors.BackgroundInsertError`).
        count_from : sequence of int, optional
            Exact counting (what :class:`Drafter` does with ``exact_counts``/``local_index``):
            every suffix of ``sequences[s]`` is walked, but only the n-grams ending at
            position ``count_from[s]`` or later add to frequencies (``0 <= count_from[s] <=
            len(sequences[s])``), so that each occurrence is counted once although windows
            overlap.  Default: SGLang's insert, where every n-gram counts.

        Examples
        --------
        >>> cache = NgramCache(capacity=1000, draft_token_num=4)
        >>> cache.insert([[1, 2, 3, 4]], wait=False)
        >>> cache.synchronize()
        >>> cache.match([[1, 2]]).tokens
        array([[2, 3, 4, 0]], dtype=int32)
        """
        v.check_bool(wait, "wait")
        batch = v.as_batch(sequences, "sequences")
        counts = None if count_from is None else v.as_count_from(count_from, batch)
        if not wait:
            self._enqueue(batch, counts)
            return
        self.synchronize()
        with self._lock:
            self._insert(batch, counts)

    def _insert(self, batch: list[np.ndarray], counts: list[int] | None) -> None:
        if counts is None:
            self._backend.insert(batch)
        else:
            self._backend.insert_counted(batch, counts)

    def match(self, contexts, request_ids: Sequence[Any] | None = None,
              total_lens: Sequence[int] | None = None, *,
              local: Sequence["NgramCache | None"] | None = None, costs: Any = None,
              batch_size: int | None = None,
              corpora: Sequence[Any] | None = None) -> DraftBatch:
        """Draft a token tree for each context (SGLang's ``batch_get``).

        Waits first for inserts queued with ``wait=False`` (as SGLang's worker synchronizes
        before every draft).

        Parameters
        ----------
        contexts : list of 1-D int sequences, or 2-D int array
            The tail of each request's sequence (SGLang sends the last ``max_trie_depth``
            tokens; 0.5.9 the last ``max_match_window_size``); the last token is the root of
            its tree.  Must be non-empty.  int32/int64 arrays and lists of plain ints are the
            cheap forms; torch tensors are read as for :meth:`insert`.
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
        local : sequence of NgramCache or None, optional
            ``match_type="ADAPTIVE"`` only: per context, the request's own cache (same
            backend), searched before this one (``None``: this one alone).  What
            :class:`Drafter` does with ``local_index``.
        costs : CostTable or CostModel, optional
            Required with ``min_expected_accept="auto"`` (refused otherwise): the step costs
            from which the tree size is chosen, jointly for the contexts of this call (pass
            a step's whole batch in one call).
        batch_size : int, optional
            With ``costs``: the requests in the step's forward (default ``len(contexts)``),
            if this call holds only some of them.
        corpora : sequence, optional
            Beyond SGLang (off by default): per context, the external corpora it may draft
            from, a collection of loaded corpus ids (``None``: all of them).  Request ``i``
            drafts what this cache would draft if only the corpora in ``corpora[i]`` were
            loaded (SGLang's split over those, in this cache's corpus order; none: the trie
            alone with the whole budget).  See ``docs/corpora.md``.
        """
        plain = (self._plain_match and local is None and costs is None and batch_size is None
                 and corpora is None)
        one = v.serving_one(contexts, request_ids, total_lens) if plain else None
        if one is not None:  # batch 1 as a server sends it: checked in one pass
            if type(self._backend) is self._pooled_cls:
                if self._held or self._due or self._done != self._queued or self._errors:
                    self.synchronize()
                with self._lock:
                    if not self._corpora.automata or not self._corpora.active:
                        pool, at = self._backend.match_one(*one)
                        return DraftBatch._pooled(pool, at, at + 1)
                    if (got := self._corpora.match_serving(self._backend, one=one)) is not None:
                        return DraftBatch._pooled(*got)
            batch, keys, lens = [one[0]], [one[1]], np.array([one[2]], np.int64)
        elif plain and type(self._backend) is self._pooled_cls and \
                (packed := v.serving_batch(contexts, request_ids, total_lens)) is not None:
            # several requests as a server sends them: checked and packed in one pass
            if self._held or self._due or self._done != self._queued or self._errors:
                self.synchronize()
            with self._lock:
                if not self._corpora.automata or not self._corpora.active:
                    return DraftBatch._pooled(*self._backend.match_packed(
                        packed[0], packed[1], request_ids, packed[2]))
                if (got := self._corpora.match_serving(self._backend, packed=packed,
                                                       keys=request_ids)) is not None:
                    return DraftBatch._pooled(*got)
            batch, keys, lens = contexts, list(request_ids), packed[2]
        else:
            batch = v.as_contexts(contexts)
            keys = lens = None
            if self._stateful:
                if request_ids is not None:
                    keys = v.as_request_ids(request_ids, len(batch))
                    if total_lens is None:
                        raise ValueError("total_lens is required with request_ids: the full "
                                         "length of each request's sequence drives its match "
                                         "state")
                if total_lens is not None:
                    lens = v.as_total_lens(total_lens, batch)
                    if keys is None:
                        lens = None  # checked, and meaningless without ids
            if self._adaptive:
                if corpora is not None:  # ADAPTIVE has no corpora: this raises
                    self._corpora.check_selection(corpora, len(batch))
                return self._match_adaptive(batch, self._local_backends(local, len(batch)),
                                            self._step_costs(costs, batch_size, len(batch)))
            if costs is not None or batch_size is not None:
                raise ValueError("costs= and batch_size= are for match_type='ADAPTIVE' with "
                                 "min_expected_accept='auto' only")
            if local is not None:
                raise ValueError("local= is for match_type='ADAPTIVE' only (local caches are "
                                 f"searched by it); this cache's is {self._config.match_type!r}")
        if self._held or self._due or self._done != self._queued or self._errors:
            self.synchronize()
        with self._lock:
            if corpora is not None:  # chosen per request (checked under the lock)
                chosen = self._corpora.check_selection(corpora, len(batch))
                tokens, mask, num_drafts = self._corpora.match(self._backend, batch, keys, lens,
                                                               chosen)
            elif self._corpora.active:
                tokens, mask, num_drafts = self._corpora.match(self._backend, batch, keys, lens)
            elif type(self._backend) is self._pooled_cls:
                return DraftBatch._pooled(*self._backend.match_pooled(batch, keys, lens))
            else:
                tokens, mask, num_drafts = self._backend.match(batch, keys, lens)
        return DraftBatch._trusted(tokens, mask, num_drafts)

    def _match_one(self, ctx: np.ndarray, key: Hashable, total: int) -> DraftBatch:
        """A :class:`Drafter`'s stateful match of one request (a non-empty int32 tail of its
        row, a plain id, ``total >= ctx.size``): no checks."""
        if type(self._backend) is self._pooled_cls and not self._corpora.active:
            if self._held or self._due or self._done != self._queued or self._errors:
                self.synchronize()
            with self._lock:
                pool, at = self._backend.match_one(ctx, key, total)
            return DraftBatch._pooled(pool, at, at + 1)
        return self.match([ctx], request_ids=[key], total_lens=[total])

    def _match_packed(self, flat: np.ndarray, offsets: np.ndarray, keys: list,
                      total_lens: np.ndarray) -> DraftBatch:
        """A :class:`Drafter`'s stateful match of a batch it packed itself (int32 ``flat``,
        int64 ``offsets`` and ``total_lens``, plain ``str``/``int`` ids): no checks."""
        b = offsets.size - 1
        if b > 1 and type(self._backend) is self._pooled_cls and not self._corpora.active:
            if self._held or self._due or self._done != self._queued or self._errors:
                self.synchronize()
            with self._lock:
                return DraftBatch._pooled(*self._backend.match_packed(flat, offsets, keys,
                                                                      total_lens))
        return self.match([flat[offsets[i]:offsets[i + 1]] for i in range(b)],
                          request_ids=keys, total_lens=total_lens.tolist())

    def _local_backends(self, local: Any, n: int) -> list | None:
        if local is None:
            return None
        if isinstance(local, (str, bytes)) or not isinstance(local, Sequence) or len(local) != n:
            raise TypeError(f"local must be a sequence of {n} NgramCache or None, one per "
                            f"context, got {type(local).__name__}")
        out = []
        for i, c in enumerate(local):
            if c is not None and (not isinstance(c, NgramCache)
                                  or c._backend_name != self._backend_name):
                raise TypeError(f"local[{i}] must be None or an NgramCache with backend "
                                f"{self._backend_name!r}, got {c!r}")
            if c is not None:
                c.synchronize()
            out.append(None if c is None else c._backend)
        return out

    def _step_costs(self, costs: Any, batch_size: Any, n: int) -> np.ndarray | None:
        from ..costs import check_costs, step_costs

        costs = check_costs(self._config, costs)
        if costs is None:
            if batch_size is not None:
                raise ValueError("batch_size= goes with costs= (min_expected_accept='auto')")
            return None
        if batch_size is None:
            batch_size = n
        elif isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < n:
            raise ValueError(f"batch_size must be an int >= the {n} contexts of this call "
                             f"(requests in the step's forward), got {batch_size!r}")
        return step_costs(costs, int(batch_size), self._config.draft_token_num)

    def _match_adaptive(self, batch: list[np.ndarray], local_backends: list | None,
                        costs: np.ndarray | None = None) -> DraftBatch:
        self.synchronize()
        with self._lock:
            tokens, mask, num, probs = self._backend.match_adaptive(batch, local_backends,
                                                                    costs)
        return DraftBatch._trusted(tokens, mask, num, probs)

    def erase(self, request_ids: Sequence[Any]) -> None:
        """Forget the match states of these requests; unknown and repeated ids are no-ops
        (as in SGLang)."""
        keys = v.as_request_ids(request_ids)
        self.synchronize()
        with self._lock:
            self._backend.erase(keys)

    def reset(self) -> None:
        """Empty the trie and forget every match state (after queued inserts have run).
        External corpora are kept, as SGLang's cache flush keeps them."""
        self.synchronize()
        with self._lock:
            self._backend.reset()

    def reserve(self) -> "NgramCache":
        """Allocate the trie's whole ``capacity`` now, as SGLang's class does when built;
        returns ``self``.

        By default the trie's arrays start small and double as nodes arrive, so memory
        follows the nodes in use (about 48 bytes per node slot with the Numba backend).  A
        doubling copies the trie and touches fresh memory while the cache's lock is held: at
        10^5-10^6 nodes it takes 10-60 ms, during which a ``match`` (or a
        :class:`Drafter`'s ``propose``) waits.  A server that cannot take such a stall
        reserves once at start-up and pays the memory of the whole capacity instead (at
        SGLang's default of 10^7 nodes, about 0.5 GiB; SGLang's own core takes 1.6 GiB).
        Kept across :meth:`reset`; a cache :meth:`load`-ed from a file starts small again.
        The reference backend has nothing to allocate.

        Examples
        --------
        >>> cache = NgramCache(capacity=1000).reserve()
        >>> cache.insert([[1, 2, 3]])             # suffixes 1 2 3, 2 3 and 3, and the root
        >>> len(cache)
        7
        """
        self.synchronize()
        with self._lock:
            self._backend.reserve()
        return self

    def _insert_packed(self, flat: np.ndarray, offsets: np.ndarray,
                       count_from: np.ndarray | None = None, *, wait: bool) -> None:
        """A :class:`Drafter`'s insert of non-empty sequences it packed itself (int32
        ``flat``, int64 ``offsets``, never written again by it), with exact counting from
        int64 ``count_from`` (within each sequence) if given: no checks, no copies.
        ``wait=False``: queued for the insert thread (every read of the trie waits for it)."""
        if not wait:
            self._push((None, (flat, offsets, count_from)))
            return
        self.synchronize()
        with self._lock:
            self._insert_flat(flat, offsets, count_from)

    def _insert_flat(self, flat: np.ndarray, offsets: np.ndarray,
                     count_from: np.ndarray | None = None) -> None:
        """Insert packed sequences (exact counting with int64 ``count_from``), lock held."""
        self._backend.insert_packed(flat, offsets, count_from)

def cache_from_sglang_args(args: Mapping[str, Any], *, tokenizer: Any = None,
                           backend: str = "numba"):
    """An :class:`~ngramspec.NgramCache` as an SGLang server with these arguments starts it:
    :meth:`NgramConfig.from_sglang_args <ngramspec.NgramConfig.from_sglang_args>`, then the
    ``--speculative-ngram-external-corpus-path`` file, if any, loaded under its path as id
    (:func:`~ngramspec.cache.corpora.read_corpus`; the whole file refused if it exceeds the token cap, as SGLang does).

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "corpus.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write("[1, 2, 3, 9, 9]" + chr(10) + "[7, 1, 2, 5]" + chr(10))
    >>> cache = cache_from_sglang_args({
    ...     "speculative_ngram_max_trie_depth": 4, "speculative_num_draft_tokens": 6,
    ...     "speculative_ngram_max_bfs_breadth": 3,
    ...     "speculative_ngram_external_sam_budget": 2,
    ...     "speculative_ngram_external_corpus_path": path})
    >>> list(cache.corpora().values())
    [10]
    """
    config = NgramConfig.from_sglang_args(args)
    cache = NgramCache(config=config, backend=backend)
    path = None
    for raw, value in args.items():  # named as from_sglang_args accepts it
        name = str(raw).lstrip("-").replace("-", "_").removeprefix("speculative_")
        if name.removeprefix("ngram_") == "external_corpus_path":
            path = value
    if path:
        cache.add_corpus(os.fspath(path), read_corpus(path, tokenizer=tokenizer))
    return cache
