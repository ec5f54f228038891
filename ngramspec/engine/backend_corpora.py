"""The Numba backend's matches with external corpora (a mixin of
:class:`~ngramspec.engine.backend.EngineBackend`: the trie part and the corpora merged in one
kernel call), and the two helpers both use to hand a batch to a kernel."""

from __future__ import annotations

from itertools import accumulate
from typing import Any, Hashable, Sequence

import numpy as np

from .batch import make_corpus_engine, match_batch_corpora, match_pooled_corpora
from .corpora.sam import grow_walks
from .tree import BUCKET_COUNTS

__all__ = ["CorpusMatches", "pack", "plain"]

_I32 = np.dtype(np.int32)


def pack(sequences: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(flat int32 tokens, int64 offsets)`` of a batch (measured: ``fromiter`` over running
    sums is a third of ``np.cumsum`` on a list at batch 48)."""
    n = len(sequences)
    if n == 1:  # the common serving case: no concatenation
        flat = plain(sequences[0])
        offsets = np.array([0, flat.size], np.int64)
    else:
        offsets = np.fromiter(accumulate(map(len, sequences), initial=0), np.int64, n + 1)
        flat = np.concatenate(sequences) if n else np.zeros(0, np.int32)
    return flat.astype(np.int32, copy=False), offsets


def plain(a: np.ndarray) -> np.ndarray:
    """``a``, or a copy where Numba would type it apart from a fresh array (a view with
    strides, read-only or unaligned): the kernels' cached entry points take one type."""
    f = a.flags
    return a if f.c_contiguous and f.behaved else np.array(a)


class CorpusMatches:
    """:class:`~ngramspec.engine.backend.EngineBackend`'s matches with external corpora (it
    provides the trie, the match states, the pools, the entry-point slots and
    ``engine_for``/``row_of``/``rows_of``/``_rows_and_lens``)."""

    def _corpus_engine_for(self, budget: int, pool: tuple, cp: tuple, cs: tuple,
                           walks: list) -> Any:
        """The :class:`CorpusEngine` of the corpora's arrays (after the rows of this call are
        taken: the walk rows grow with the match states)."""
        w = walks[0]
        if w.shape[0] < self.states[0].size:
            w = walks[0] = grow_walks(w, self.states[0].size)
        arrays = self._ce_arrays
        if self._corpus_engine is None or arrays[0] is not pool or arrays[1] is not cp or \
                arrays[2] is not cs or arrays[3] is not w or arrays[4] != budget:
            self._ce_arrays = (pool, cp, cs, w, budget)
            self._corpus_engine = make_corpus_engine(pool, cp, cs, w, int(budget))
            # Other corpora may type apart (one automaton's arrays are views of its own).
            self._entries.forget("pooled_corpora")
        return self._corpus_engine

    def match_one_corpora(self, ctx: np.ndarray, key: Hashable, total: int, budget: int,
                          pool: tuple, cp: tuple, cs: tuple, walks: list) -> tuple[tuple, int]:
        """:meth:`match_one` with external corpora, every corpus drawn from (arguments from
        ``budget`` on as :meth:`match_corpora` takes them; ``cp[0]``, the budget per corpus,
        at least 1): the batch kernel on reused one-element arrays."""
        ctx = plain(ctx)
        offsets = self._one_offsets
        offsets[1] = ctx.size
        one = self._one_row_len
        one[0, 0] = self.row_of(key)
        one[1, 0] = total
        pool_, at, _ = self._run_pooled_corpora(ctx, offsets, one[0], one[1],
                                                (budget, pool, cp, cs, walks))
        return pool_, at

    def match_packed_corpora(self, flat: np.ndarray, offsets: np.ndarray, keys: list,
                             total_lens: np.ndarray, budget: int, pool: tuple, cp: tuple,
                             cs: tuple, walks: list) -> tuple[tuple, int, int]:
        """:meth:`match_packed` with external corpora, every corpus drawn from (arguments from
        ``budget`` on as :meth:`match_corpora` takes them)."""
        return self._run_pooled_corpora(plain(flat), offsets, self.rows_of(keys), total_lens,
                                        (budget, pool, cp, cs, walks))

    def _run_pooled_corpora(self, flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray,
                            lens: np.ndarray, corpora: tuple) -> tuple[tuple, int, int]:
        """:func:`match_pooled_corpora` into the next pool rows (``corpora``: ``(budget, pool,
        cp, cs, walks)``, after the rows are taken: the walks grow with the match states)."""
        b = offsets.size - 1
        eng, at = self.engine_for(b)
        args = (flat, offsets, rows, lens, eng, self._corpus_engine_for(*corpora), at)
        self._entries("pooled_corpora", match_pooled_corpora, args)(*args)
        return self._pool, at, at + b

    def match_corpora(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
                      total_lens: np.ndarray | None, budget: int, pool: tuple, cp: tuple,
                      cs: tuple, walks: list, sel: np.ndarray | None = None,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`match` with external corpora in the same kernel call
        (:func:`match_batch_corpora`): the trie part with ``budget`` nodes, then the corpora
        (``pool``, ``cp``, ``cs``: see :func:`~ngramspec.engine.corpora.sam.corpus_row`) merged
        in.  ``walks``: a one-item list holding the corpus walk rows
        (:func:`~ngramspec.engine.corpora.sam.corpus_walks`), grown here with the match states.
        ``sel``: per request, the corpora it draws from (see the kernel; None: all).
        Profile ``sglang-0.5.23`` only."""
        n = cp[1]
        b = len(contexts)
        if b == 1:  # serving's common case: the offsets array reused (read-only in the kernel)
            flat = plain(contexts[0])
            if flat.dtype is not _I32:
                flat = flat.astype(np.int32)
            offsets = self._one_offsets
            offsets[1] = flat.size
        else:
            flat, offsets = pack(contexts)
        tokens = np.empty((b, n), np.int32)
        mask = np.empty((b, n, n), np.bool_)
        num = np.empty(b, np.int32)
        rows, lens = self._rows_and_lens(keys, total_lens, b)
        params = self._corpus_params
        if params[3] != budget:
            params = self._corpus_params = self._params[:3] + (int(budget),) + self._params[4:]
        w = walks[0]
        if w.shape[0] < self.states[0].size:
            w = walks[0] = grow_walks(w, self.states[0].size)
        if sel is None:
            sel = self._no_sel
        args = (flat, offsets, rows, lens, keys is None, params, self.trie.packed, self.states,
                BUCKET_COUNTS, self._buf, pool, cp, cs, w, sel,
                int(self.config.external_sam_budget), tokens, mask, num)
        self._entries("corpora", match_batch_corpora, args)(*args)
        return tokens, mask, num
