"""The Numba backend: one kernel call per batch over flat arrays."""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from .._jit import jit
from ..config import NgramConfig
from ..stdorder import HASHTABLE_BUCKET_COUNTS
from .match import match_anchors, window_anchors
from .tree import build_bfs_scheduled, build_prob, fill_result
from .adaptive import adaptive_scratch, draft_adaptive
from .trie import M_SIZE, TrieArrays, insert_counted_kernel, insert_kernel

__all__ = ["EngineBackend"]

_BUCKET_COUNTS = np.asarray(HASHTABLE_BUCKET_COUNTS, dtype=np.int64)


@jit
def _draft_scratch(budget, max_depth, max_b):
    """Work arrays for drafting one request at a time (reused across a batch).

    ``max_depth`` bounds the anchors per request (trie depth; 0.5.9 has fewer windows).
    """
    n = budget + 1
    heap_cap = max_b * max_depth * (n + 1) + 1
    return (np.empty(max_depth, np.int32), np.empty(max_depth, np.int32),
            np.empty(max_depth, np.int32),
            np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.int32),
            np.empty(n, np.int32), np.empty(n, np.int64), np.empty(n, np.int32),
            np.empty(n + 1, np.int32), np.empty(n + 1, np.float64), np.empty(n + 1, np.int32),
            np.empty(n, np.int32),
            np.empty(heap_cap, np.float64), np.empty(heap_cap, np.int32),
            np.empty(heap_cap, np.int32), np.empty(max_b, np.int32))


@jit
def _draft(ctx, count, top, steps, min_b, max_b, budget, prob_mode, tok, freq, c_head, c_next,
           bucket_counts, sc, out_tokens, out_mask):
    """Build one request's tree from the ``count`` anchors in ``sc`` and lay it out; returns
    the drafted node count.  ``top``/``steps``: the BFS breadth schedule
    (:func:`~ngramspec.engine.tree.build_bfs_scheduled`)."""
    (_, a_nodes, a_depths, t_tok, t_head, t_next, t_cnt, t_bc, order, q_par, q_breadth, q_node,
     slot_parent, h_p, h_par, h_node, k_node) = sc
    if prob_mode:
        used = build_prob(a_nodes, count, budget, max_b, tok, freq, c_head, c_next, t_tok,
                          t_head, t_next, t_cnt, t_bc, bucket_counts, order, k_node, h_p,
                          h_par, h_node)
    else:
        used = build_bfs_scheduled(a_nodes, a_depths, count, budget, top, steps, min_b, max_b,
                                   tok, c_head, c_next, t_tok, t_head, t_next, t_cnt, t_bc,
                                   bucket_counts, order, q_par, q_breadth, q_node)
    fill_result(ctx[ctx.size - 1], budget + 1, t_tok, t_head, t_next, order, slot_parent,
                out_tokens, out_mask)
    return used


@jit
def _match_batch(flat, offsets, state_rows, total_lens, stateless, max_depth, min_b, max_b,
                 budget, prob_mode, tok, freq, ver, c_head, c_next, nchild, ht_key, ht_val, meta,
                 st_epoch, st_ptl, st_n, st_node, st_ver, bucket_counts, out_tokens, out_mask,
                 out_num):
    """SGLang 0.5.23's ``batchMatch``: stateful (or, with ``stateless``, fresh) anchors per
    request, one shared-budget tree each, in batch order."""
    sc = _draft_scratch(budget, max_depth, max_b)
    scratch, a_nodes, a_depths = sc[0], sc[1], sc[2]
    mmd = max(1, max_depth - 1)
    for b in range(offsets.size - 1):
        ctx = flat[offsets[b]:offsets[b + 1]]
        row = state_rows[b]
        total = total_lens[b]
        if stateless:
            st_epoch[row] = 0
            st_ptl[row] = 0
            st_n[row] = 0
            total = ctx.size
        count = match_anchors(ctx, total, row, max_depth, ver, nchild, ht_key, ht_val, meta,
                              st_epoch, st_ptl, st_n, st_node, st_ver, scratch, a_nodes,
                              a_depths)
        out_num[b] = _draft(ctx, count, mmd, mmd, min_b, max_b, budget, prob_mode, tok, freq,
                            c_head, c_next, bucket_counts, sc, out_tokens[b], out_mask[b])


@jit
def _match_batch_windows(flat, offsets, min_w, max_w, max_depth, min_b, max_b, budget,
                         prob_mode, tok, freq, c_head, c_next, nchild, ht_key, ht_val,
                         bucket_counts, out_tokens, out_mask, out_num):
    """SGLang 0.5.9's ``batchMatch``: stateless match windows ``min_w .. max_w`` per request
    (``max_depth`` = ``branch_length``), one shared-budget tree each, in batch order."""
    sc = _draft_scratch(budget, max_depth, max_b)
    a_nodes, a_depths = sc[1], sc[2]
    steps = max_w - min_w + 1
    for b in range(offsets.size - 1):
        ctx = flat[offsets[b]:offsets[b + 1]]
        count = window_anchors(ctx, min_w, max_w, nchild, ht_key, ht_val, a_nodes, a_depths)
        out_num[b] = _draft(ctx, count, max_w, steps, min_b, max_b, budget, prob_mode, tok,
                            freq, c_head, c_next, bucket_counts, sc, out_tokens[b],
                            out_mask[b])


def _pack(sequences: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum([s.size for s in sequences], out=offsets[1:])
    flat = np.concatenate(sequences) if sequences else np.zeros(0, np.int32)
    return flat.astype(np.int32, copy=False), offsets


class EngineBackend:
    """SGLang's ``Ngram`` object on flat arrays; inputs arrive validated.

    Profile ``sglang-0.5.23``: :func:`_match_batch` with match states.  ``sglang-0.5.9``:
    :func:`_match_batch_windows` (stateless), and inserts skip the suffix starts
    ``i + min_match_window_size >= len`` (``insert_kernel``'s ``starts_from``).
    """

    def __init__(self, config: NgramConfig) -> None:
        self.config = config
        self.trie = TrieArrays(config.capacity)
        self._path = np.zeros(config.trie_depth, np.int32)
        # Suffix starts an insert skips at the end: none in 0.5.23, min_match_window_size in 0.5.9.
        self.insert_skip = 0 if config.stateful else int(config.min_match_window_size or 0)
        self._rows: dict[Hashable, int] = {}
        self._adaptive_scratch = None
        self._alloc_states(16)
        self._free_rows = list(range(15, 0, -1))  # row 0 is scratch for stateless matching

    def _alloc_states(self, rows: int) -> None:
        d = self.config.trie_depth
        old = getattr(self, "st_epoch", None)
        new = (np.zeros(rows, np.int64), np.zeros(rows, np.int64), np.zeros(rows, np.int32),
               np.full((rows, d), -1, np.int32), np.zeros((rows, d), np.int64))
        if old is not None:
            k = old.size
            for a, b in zip(new, (self.st_epoch, self.st_ptl, self.st_n, self.st_node,
                                  self.st_ver)):
                a[:k] = b
        self.st_epoch, self.st_ptl, self.st_n, self.st_node, self.st_ver = new

    def _row(self, key: Hashable) -> int:
        row = self._rows.get(key)
        if row is None:
            if not self._free_rows:
                used = self.st_epoch.size
                self._alloc_states(2 * used)
                self._free_rows = list(range(2 * used - 1, used - 1, -1))
            row = self._free_rows.pop()
            self.st_epoch[row] = 0  # a new state always rebuilds
            self.st_ptl[row] = 0
            self.st_n[row] = 0
            self._rows[key] = row
        return row

    def insert(self, sequences: Sequence[np.ndarray], starts_from: int | None = None) -> None:
        if starts_from is None:
            starts_from = self.insert_skip
        seqs = [s for s in sequences if s.size]
        if not seqs:
            return
        flat, offsets = _pack(seqs)
        pos = np.zeros(2, np.int64)
        t = self.trie
        while not insert_kernel(flat, offsets, starts_from, self.config.trie_depth,
                                self.config.capacity, t.tok, t.par, t.freq, t.ver, t.c_head,
                                t.c_next, t.c_prev, t.nchild, t.g_next, t.g_prev, t.free,
                                t.ht_key, t.ht_val, t.meta, self._path, pos):
            t.grow()

    def match(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
              total_lens: np.ndarray | None, *, budget: int | None = None,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``budget``: drafted nodes (default ``config.budget``; less with corpora, whose
        trees are merged in afterwards); the result has ``budget + 1`` slots."""
        cfg = self.config
        budget = cfg.budget if budget is None else budget
        n = budget + 1
        b = len(contexts)
        flat, offsets = _pack(list(contexts))
        tokens = np.empty((b, n), np.int32)
        mask = np.empty((b, n, n), np.bool_)
        num = np.empty(b, np.int32)
        t = self.trie
        if not cfg.stateful:
            _match_batch_windows(flat, offsets, cfg.min_match_window_size,
                                 cfg.max_match_window_size, cfg.trie_depth, cfg.min_bfs_breadth,
                                 cfg.max_bfs_breadth, budget, cfg.match_type == "PROB",
                                 t.tok, t.freq, t.c_head, t.c_next, t.nchild, t.ht_key, t.ht_val,
                                 _BUCKET_COUNTS, tokens, mask, num)
            return tokens, mask, num
        if keys is None:
            rows = np.zeros(b, np.int64)
            lens = np.zeros(b, np.int64)
        else:
            rows = np.asarray([self._row(k) for k in keys], dtype=np.int64)
            lens = total_lens
        _match_batch(flat, offsets, rows, lens, keys is None, cfg.max_trie_depth,
                     cfg.min_bfs_breadth, cfg.max_bfs_breadth, budget,
                     cfg.match_type == "PROB", t.tok, t.freq, t.ver, t.c_head, t.c_next,
                     t.nchild, t.ht_key, t.ht_val, t.meta, self.st_epoch, self.st_ptl,
                     self.st_n, self.st_node, self.st_ver, _BUCKET_COUNTS, tokens, mask, num)
        return tokens, mask, num

    def insert_counted(self, sequences: Sequence[np.ndarray], count_from: Sequence[int]) -> None:
        """Exact counting: every suffix inserted, only positions ``>= count_from`` counted."""
        keep = [(s, c) for s, c in zip(sequences, count_from) if s.size]
        if not keep:
            return
        flat, offsets = _pack([s for s, _ in keep])
        counts = np.asarray([c for _, c in keep], dtype=np.int64)
        pos = np.zeros(2, np.int64)
        t = self.trie
        while not insert_counted_kernel(flat, offsets, self.insert_skip, counts,
                                        self.config.trie_depth, self.config.capacity, t.tok,
                                        t.par, t.freq, t.ver, t.c_head, t.c_next, t.c_prev,
                                        t.nchild, t.g_next, t.g_prev, t.free, t.ht_key,
                                        t.ht_val, t.meta, self._path, pos):
            t.grow()

    def match_adaptive(self, contexts: Sequence[np.ndarray],
                       local: Sequence["EngineBackend | None"] | None = None,
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """ADAPTIVE drafts (stateless); ``local[b]``: request b's own backend, searched first."""
        cfg = self.config
        n = cfg.draft_token_num
        b = len(contexts)
        tokens = np.empty((b, n), np.int32)
        mask = np.empty((b, n, n), np.bool_)
        num = np.empty(b, np.int32)
        probs = np.empty((b, n), np.float64)
        g = self.trie
        if self._adaptive_scratch is None:
            self._adaptive_scratch = adaptive_scratch(cfg.budget, cfg.trie_depth)
        sc = self._adaptive_scratch
        for i, ctx in enumerate(contexts):
            own = local[i] if local is not None else None
            lt = (own or self).trie
            num[i] = draft_adaptive(
                ctx, cfg.trie_depth, cfg.budget, cfg.min_token_prob, cfg.max_spec_factor,
                cfg.min_expected_accept, own is not None, lt.tok, lt.freq, lt.c_head, lt.c_next,
                lt.nchild, lt.ht_key, lt.ht_val, g.tok, g.freq, g.c_head, g.c_next, g.nchild,
                g.ht_key, g.ht_val, _BUCKET_COUNTS, sc, tokens[i], mask[i], probs[i])
        return tokens, mask, num, probs

    def erase(self, keys: Sequence[Hashable]) -> None:
        for key in keys:
            row = self._rows.pop(key, None)
            if row is not None:
                self._free_rows.append(row)

    def reset(self) -> None:
        self.trie.reset()
        self._rows.clear()
        self._free_rows = list(range(self.st_epoch.size - 1, 0, -1))

    @property
    def node_count(self) -> int:
        return int(self.trie.meta[M_SIZE])

    def check_integrity(self) -> None:
        """Raise :class:`~ngramspec.errors.IntegrityError` if an invariant is broken."""
        from .integrity import check_states, check_trie

        check_states(self, check_trie(self.trie, self.config.trie_depth))
