"""The Numba backend: one kernel call per batch over flat arrays (the kernels and the Numba
structures they read are in :mod:`ngramspec.engine.batch`)."""

from __future__ import annotations

from typing import Any, Hashable, Sequence

import numpy as np

from .._canonical import CanonicalContent
from .._jit import EntryPoints
from ..config import NgramConfig
from .adaptive import (adaptive_scratch, choose_cap, draft_adaptive, draft_adaptive_saved,
                       layout_prefix)
from .batch import (POOL_ROWS, _set_pool, make_engine, match_batch, match_batch_windows,
                    match_one, match_pooled)
from .match import States, new_states
from .backend_corpora import CorpusMatches, pack, plain
from .tree import BUCKET_COUNTS, scratch_sizes
from .trie import (LRU_LIST, LRU_STAMPS, M_EPOCH, M_FREETOP, M_SIZE, M_UNUSED, TrieArrays,
                   build_lru, insert_kernel)

__all__ = ["EngineBackend"]

_I32, _I64 = np.dtype(np.int32), np.dtype(np.int64)

class EngineBackend(CorpusMatches):
    """SGLang's ``Ngram`` object on flat arrays; inputs arrive validated.

    Profile ``sglang-0.5.23``: :func:`match_batch` with match states.  ``sglang-0.5.9``:
    :func:`match_batch_windows` (stateless), and inserts skip the suffix starts
    ``i + min_match_window_size >= len`` (``insert_kernel``'s ``starts_from``).

    State: ``trie`` (:class:`~ngramspec.engine.trie.TrieArrays`), ``states`` (a plain
    :data:`~ngramspec.engine.match.States` bundle; row 0 is scratch for stateless matching) and
    the request-id to row map.
    """

    pooled = True  # the serving paths write drafts into an output pool (PooledBackend)

    def __init__(self, config: NgramConfig) -> None:
        self.config = config
        self.trie = TrieArrays(config.capacity)
        # How the trie keeps its LRU order (trie.insert_suffixes): the list, or touch stamps
        # (keep_stamps) until an insert could evict; the touch clock; how many times stamps
        # became the list (a Drafter's remembered nodes carry no versions before that).
        self.lru = np.array([LRU_LIST, 0, 0], np.int64)
        self._stamps = False
        self._path = np.zeros(config.trie_depth, np.int32)
        # Suffix starts an insert skips at the end: none in 0.5.23, min_match_window_size in 0.5.9.
        self.insert_skip = 0 if config.stateful else int(config.min_match_window_size or 0)
        self._params = (int(config.max_trie_depth if config.stateful else config.trie_depth),
                        int(config.min_bfs_breadth), int(config.max_bfs_breadth),
                        int(config.budget), int(config.match_type == "PROB"))
        self._rows: dict[Hashable, int] = {}
        self._adaptive_scratch = None
        self.auto_rate = np.zeros(2, np.float64)  # min_expected_accept="auto": tokens, time
        self.states = new_states(16, config.trie_depth)
        self._free_rows = list(range(15, 0, -1))  # row 0 is scratch for stateless matching
        self._last_keys: list | None = None  # the last batch of ids and its rows (a cache)
        self._last_rows = np.zeros(0, np.int64)
        # Tree scratch reused by every match call, and the match kernel's compiled entry point.
        sizes = scratch_sizes(self._params[3], self._params[0], self._params[2])
        self._buf = tuple(np.empty(k, dt) for k, dt in zip(sizes, (np.int32, np.int64,
                                                                     np.float64)))
        # The kernels' compiled entry points: the same argument types at every call
        self._entries = EntryPoints()
        self._zero_counts = np.zeros(64, np.int64)
        self._no_sel = np.zeros((1, 0), np.int32)  # match_batch_corpora: no selection
        self._offsets1: dict[int, np.ndarray] = {}  # batch-1 offsets by context length
        self._one_offsets = np.zeros(2, np.int64)  # match_corpora at batch 1
        self._corpus_params = self._params
        # Stateful matches write into rows of an output pool, handed out once each and never
        # written again (a result keeps its pool alive): measured, allocating the three
        # output arrays per call cost 0.5 us of a 7 us batch-1 match.
        self._engine = None  # the Engine of the arrays below (rebuilt when one is replaced)
        self._eng_arrays: tuple = ()
        self._pool: tuple = ()
        self._pool_rows = self._pool_at = 0
        # The same for matches with corpora: the CorpusEngine of the corpora's arrays (rebuilt,
        # and the entry points looked up again, when one of them is replaced).
        self._corpus_engine = None
        self._ce_arrays: tuple = ()
        self._one_row_len = np.zeros((2, 1), np.int64)  # batch 1's state row and total length

    # Match states ------------------------------------------------------------------------

    @property
    def named_states(self) -> States:
        """The match-state table with named fields (for Python-side readers)."""
        return States(*self.states)

    def _grow_states(self) -> None:
        used = self.states[0].size
        self.states = new_states(2 * used, self.config.trie_depth, self.states)
        self._free_rows = list(range(2 * used - 1, used - 1, -1))

    def _new_row(self, key: Hashable) -> int:
        if not self._free_rows:
            self._grow_states()
        row = self._free_rows.pop()
        st = self.states
        st[0][row] = 0  # a new state always rebuilds
        st[1][row] = 0
        st[2][row] = 0
        self._rows[key] = row
        return row

    def row_of(self, key: Hashable) -> int:
        """The state row of ``key`` (a new one for an unknown id)."""
        row = self._rows.get(key)
        return self._new_row(key) if row is None else row

    def rows_of(self, keys: Sequence[Hashable]) -> np.ndarray:
        """State rows of ``keys`` (new ones for unknown ids); the last batch's rows are reused
        when the same ids come again (nothing erased or reset since: that clears the cache)."""
        last = self._last_keys
        if last is not None and len(last) == len(keys) and last == (
                keys if type(keys) is list else list(keys)):
            return self._last_rows
        get = self._rows.get
        rows = [get(k) for k in keys]
        if None in rows:
            rows = [self._new_row(k) if r is None else r for k, r in zip(keys, rows)]
        self._last_keys = list(keys)
        self._last_rows = np.asarray(rows, np.int64)
        return self._last_rows

    # The LRU order ---------------------------------------------------------------------------

    def keep_stamps(self) -> bool:
        """Keep the LRU order as touch stamps (cheaper inserts) until an insert could evict,
        then as the list; possible only on a trie that was never written (a Drafter's own
        cache).  Whatever reads the order (eviction, export, integrity) gets the list first,
        the very one the linked moves would have made (:func:`~.trie.build_lru`)."""
        m = self.trie.meta
        if m[M_UNUSED] != 1 or m[M_FREETOP] != 0:
            return False
        self._stamps = True
        self.lru[0] = LRU_STAMPS
        self.lru[1] = 0
        return True

    def lru_list(self) -> None:
        """The LRU order as the list from here on."""
        if self.lru[0] == LRU_STAMPS:
            build_lru(self.trie.named())
            self.lru[0] = LRU_LIST
            self.lru[2] += 1

    def _room(self, new_nodes: int) -> None:
        """The list before an insert of at most ``new_nodes`` nodes that could evict."""
        if self.lru[0] == LRU_STAMPS and \
                self.trie.meta[M_SIZE] + new_nodes > self.config.capacity:
            self.lru_list()

    # Operations --------------------------------------------------------------------------

    def _insert(self, sequences: Sequence[np.ndarray], starts_from: int,
                count_from: np.ndarray | None) -> None:
        keep = [i for i, s in enumerate(sequences) if s.size]
        if not keep:
            return
        flat, offsets = pack([sequences[i] for i in keep])
        counts = (np.zeros(len(keep), np.int64) if count_from is None
                  else np.asarray([count_from[i] for i in keep], np.int64))
        pos = np.zeros(2, np.int64)
        t = self.trie
        self._room(flat.size * self.config.trie_depth)
        while not insert_kernel(flat, offsets, starts_from, counts, self.config.trie_depth,
                                self.config.capacity, t.bundle, self._path, pos, self.lru):
            t.grow()

    def insert(self, sequences: Sequence[np.ndarray], starts_from: int | None = None) -> None:
        self._insert(sequences, self.insert_skip if starts_from is None else starts_from, None)

    def insert_packed(self, flat: np.ndarray, offsets: np.ndarray,
                      count_from: np.ndarray | None = None) -> None:
        """:meth:`insert` (or with int64 ``count_from``, :meth:`insert_counted`) of non-empty
        sequences already packed (int32 ``flat``, int64 ``offsets``)."""
        pos = np.zeros(2, np.int64)
        counts = self._zero_counts if count_from is None else count_from
        if counts.size < offsets.size - 1:
            counts = self._zero_counts = np.zeros(2 * offsets.size, np.int64)
        t = self.trie
        self._room(flat.size * self.config.trie_depth)
        args = (flat, offsets, self.insert_skip, counts, self.config.trie_depth,
                self.config.capacity, t.bundle, self._path, pos, self.lru)
        kernel = self._entries("insert", insert_kernel, args)  # (a Drafter's windows)
        while not kernel(*args):
            t.grow()
            args = args[:6] + (t.bundle,) + args[7:]

    def insert_counted(self, sequences: Sequence[np.ndarray], count_from: Sequence[int]) -> None:
        """Exact counting: every suffix inserted, only positions ``>= count_from`` counted."""
        self._insert(sequences, self.insert_skip, count_from)

    def match(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
              total_lens: np.ndarray | None, *, budget: int | None = None,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Drafts of a batch: ``(tokens (B, n) int32, mask (B, n, n) bool, num (B,) int32)``.

        ``keys``: request ids (None: stateless, fresh anchors); ``total_lens``: their total
        sequence lengths.  One kernel call for the whole batch.  ``budget``: drafted nodes
        (default ``config.budget``; less with corpora, whose trees are merged in afterwards);
        the result then has ``budget + 1`` slots.
        """
        cfg = self.config
        params = self._params
        if budget is not None:
            params = params[:3] + (int(budget),) + params[4:]
        n = params[3] + 1
        b = len(contexts)
        if b == 1:  # the common serving case: no concatenation, offsets reused
            flat = plain(contexts[0])
            if flat.dtype is not _I32:
                flat = flat.astype(np.int32)
            offsets = self._offsets1.get(flat.size)
            if offsets is None:
                offsets = np.array([0, flat.size], np.int64)
                if flat.size <= 1024:  # (bounded: contexts are tails of at most the trie depth)
                    self._offsets1[flat.size] = offsets
        else:
            flat, offsets = pack(contexts)
        tokens = np.empty((b, n), np.int32)
        mask = np.empty((b, n, n), np.bool_)
        num = np.empty(b, np.int32)
        if not cfg.stateful:
            match_batch_windows(flat, offsets, cfg.min_match_window_size,
                                cfg.max_match_window_size, params, self.trie.packed,
                                BUCKET_COUNTS, self._buf, tokens, mask, num)
            return tokens, mask, num
        rows, lens = self._rows_and_lens(keys, total_lens, b)
        args = (flat, offsets, rows, lens, keys is None, params, self.trie.packed,
                self.states, BUCKET_COUNTS, self._buf, tokens, mask, num)
        self._entries("match", match_batch, args)(*args)
        return tokens, mask, num

    def _rows_and_lens(self, keys: Sequence[Hashable] | None, total_lens: Any, b: int
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The match-state rows of ``keys`` and the int64 total lengths (zeros for a
        stateless call, ``keys`` None)."""
        if keys is None:
            rows = np.zeros(b, np.int64)
            return rows, rows
        rows = self.rows_of(keys)
        lens = (total_lens if type(total_lens) is np.ndarray and total_lens.dtype is _I64
                else np.asarray(total_lens, np.int64))
        return rows, plain(lens)

    @property
    def pool(self) -> tuple:
        """The output pool (tokens, mask, num) that :meth:`engine_for`'s rows are in."""
        return self._pool

    def engine_for(self, b: int) -> tuple:
        """The :class:`Engine` for a stateful match of ``b`` requests, and the first of the
        ``b`` pool rows it writes (taken now)."""
        at = self._pool_at
        eng = self._engine
        if at + b > self._pool_rows:
            n = self._params[3] + 1
            rows = max(POOL_ROWS, b)
            self._pool = (np.empty((rows, n), np.int32), np.empty((rows, n, n), np.bool_),
                          np.empty(rows, np.int32))
            self._pool_rows, at = rows, 0
            if eng is not None:
                _set_pool(eng, *self._pool)
        arrays = self._eng_arrays
        if eng is None or arrays[0] is not self.trie.packed or arrays[1] is not self.states:
            self._eng_arrays = (self.trie.packed, self.states)
            eng = self._engine = make_engine(self.trie.packed, self.states, self._buf,
                                             BUCKET_COUNTS, self._params, *self._pool)
        self._pool_at = at + b
        return eng, at

    def match_one(self, ctx: np.ndarray, key: Hashable, total: int) -> tuple[tuple, int]:
        """Profile ``sglang-0.5.23``: the drafts of one request (``ctx`` an int32 array, its
        id, its total length) as ``(pool, row)``: they are row ``row`` of the three arrays
        ``pool`` (tokens, mask, num), which no later call writes."""
        row = self.row_of(key)
        ctx = plain(ctx)
        eng, at = self.engine_for(1)
        args = (ctx, row, total, False, eng, at)
        self._entries("one", match_one, args)(*args)
        return self._pool, at

    def match_packed(self, flat: np.ndarray, offsets: np.ndarray, keys: list,
                     total_lens: np.ndarray) -> tuple[tuple, int, int]:
        """:meth:`match_pooled` of a batch already packed (``flat`` int32 tokens, ``offsets``
        int64) with request ids ``keys`` and int64 ``total_lens``."""
        return self._run_pooled(flat, offsets, self.rows_of(keys), total_lens, False)

    def _run_pooled(self, flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray,
                    lens: np.ndarray, stateless: bool) -> tuple[tuple, int, int]:
        b = offsets.size - 1
        eng, at = self.engine_for(b)
        args = (flat, offsets, rows, lens, stateless, eng, at)
        self._entries("pooled", match_pooled, args)(*args)
        return self._pool, at, at + b

    def match_pooled(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
                     total_lens: np.ndarray | None) -> tuple[tuple, int, int]:
        """Profile ``sglang-0.5.23``: :meth:`match` with the drafts in rows ``start .. stop``
        of the three arrays ``pool`` (tokens, mask, num), which no later call writes; returns
        ``(pool, start, stop)``."""
        b = len(contexts)
        if b == 1 and keys is not None:
            pool, at = self.match_one(contexts[0], keys[0], int(total_lens[0]))
            return pool, at, at + 1
        flat, offsets = pack(contexts)
        rows, lens = self._rows_and_lens(keys, total_lens, b)
        return self._run_pooled(flat, offsets, rows, lens, keys is None)

    def match_adaptive(self, contexts: Sequence[np.ndarray],
                       local: Sequence["EngineBackend | None"] | None = None,
                       costs: np.ndarray | None = None,
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """ADAPTIVE drafts (stateless); ``local[b]``: request b's own backend, searched first.
        ``costs`` (``min_expected_accept="auto"``): the step time per drafted-node cap, the
        cap chosen over the batch (:func:`~.adaptive.choose_cap`)."""
        from ..config.acceptance_table import calibration_array

        cfg = self.config
        n = cfg.draft_token_num
        b = len(contexts)
        tokens = np.empty((b, n), np.int32)
        mask = np.empty((b, n, n), np.bool_)
        num = np.empty(b, np.int32)
        probs = np.empty((b, n), np.float64)
        if self._adaptive_scratch is None:
            self._adaptive_scratch = adaptive_scratch(cfg.budget, cfg.trie_depth)
        sc = self._adaptive_scratch
        auto = costs is not None
        params = (int(cfg.trie_depth), int(cfg.budget), float(cfg.min_token_prob),
                  float(cfg.max_spec_factor), 0.0 if auto else float(cfg.min_expected_accept),
                  float(cfg.shared_pseudo_count))
        cal = calibration_array(cfg)
        shared = self.trie.bundle
        if not auto:
            for i, ctx in enumerate(contexts):
                own = local[i] if local is not None else None
                args = (plain(ctx), params, None if own is None else own.trie.bundle, shared,
                        BUCKET_COUNTS, sc, tokens[i], mask[i], probs[i], cal)
                # (by whether a local trie is searched: two kinds of arguments)
                num[i] = self._entries(("adaptive", own is None), draft_adaptive, args)(*args)
            return tokens, mask, num, probs
        tok_rows = np.zeros((b, n), np.int32)
        par_rows = np.zeros((b, n), np.int32)
        prob_rows = np.zeros((b, n), np.float64)
        for i, ctx in enumerate(contexts):
            own = local[i] if local is not None else None
            num[i] = draft_adaptive_saved(ctx, params, None if own is None else own.trie.bundle,
                                          shared, BUCKET_COUNTS, sc, tokens[i], mask[i],
                                          probs[i], cal, tok_rows[i], par_rows[i], prob_rows[i])
        cap = choose_cap(prob_rows, num, np.ascontiguousarray(costs, np.float64),
                         self.auto_rate)
        for i, ctx in enumerate(contexts):
            if num[i] > cap:
                num[i] = cap
                layout_prefix(int(ctx[ctx.size - 1]), cap, tok_rows[i], par_rows[i],
                              prob_rows[i], sc, BUCKET_COUNTS, tokens[i], mask[i], probs[i])
        return tokens, mask, num, probs

    def erase(self, keys: Sequence[Hashable]) -> None:
        self._last_keys = None
        for key in keys:
            row = self._rows.pop(key, None)
            if row is not None:
                self._free_rows.append(row)

    def reset(self) -> None:
        self.trie.reset()
        if self._stamps:  # an empty trie: stamps again
            self.lru[0] = LRU_STAMPS
            self.lru[1] = 0
        self.auto_rate[:] = 0.0
        self._rows.clear()
        self._last_keys = None
        self._free_rows = list(range(self.states[0].size - 1, 0, -1))

    def reserve(self) -> None:
        self.trie.reserve()

    @property
    def node_count(self) -> int:
        return int(self.trie.meta[M_SIZE])

    @property
    def nbytes(self) -> int:
        """Bytes held by the trie's arrays (the match states not included)."""
        return self.trie.nbytes

    def check_integrity(self) -> None:
        """Raise :class:`~ngramspec.errors.IntegrityError` if an invariant is broken."""
        from .integrity import check_states, check_trie

        self.lru_list()
        check_states(self, check_trie(self.trie, self.config.trie_depth))

    # Canonical content ---------------------------------------------------------------------

    def to_canonical(self) -> CanonicalContent:
        """The backend-independent content (:class:`~ngramspec._canonical.CanonicalContent`):
        nodes in global LRU order, match states sorted by ``(isinstance(id, str), id)``."""
        from .export import export_states, export_trie

        self.lru_list()
        token, parent, freq, number = export_trie(self.trie)
        if not self.config.stateful:  # 0.5.9 matches statelessly: no states to keep
            return CanonicalContent(int(self.trie.meta[M_EPOCH]), token, parent, freq, [],
                                    **CanonicalContent.no_states(self.config.trie_depth))
        keys, epoch, ptl, count, refs = export_states(self, number)
        order = sorted(range(len(keys)), key=lambda i: (isinstance(keys[i], str), keys[i]))
        idx = np.asarray(order, np.int64)
        return CanonicalContent(
            epoch=int(self.trie.meta[M_EPOCH]), node_token=token, node_parent=parent,
            node_freq=freq, request_ids=[keys[i] for i in order], state_epoch=epoch[idx],
            state_processed_len=ptl[idx], state_count=count[idx], state_refs=refs[idx])

    @classmethod
    def from_canonical(cls, config: NgramConfig, content: CanonicalContent) -> "EngineBackend":
        """A backend holding validated canonical ``content`` under ``config``."""
        from .export import import_states, import_trie

        backend = cls(config)
        c = content
        backend.trie = import_trie(config.capacity, int(c.epoch), c.node_token, c.node_parent,
                                   c.node_freq)
        if c.request_ids:
            import_states(backend, list(c.request_ids), c.state_epoch, c.state_processed_len,
                          c.state_count, c.state_refs)
        return backend
