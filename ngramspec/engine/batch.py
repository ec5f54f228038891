"""The match kernels of the Numba backend (:class:`.backend.EngineBackend`):
one call per batch over flat arrays, and the Numba structures (:class:`Engine`,
:class:`CorpusEngine`) that stateful matches read in one unboxing step.
"""

from __future__ import annotations

from types import SimpleNamespace

from numba.core import types as _nbtypes
from numba.experimental import structref as _structref

from .._jit import jit, jit_inline
from .match import States, match_anchors, window_anchors
from .corpora.sam import corpus_row, corpus_scratch_in
from .tree import build_bfs_scheduled, build_prob, fill_result, scratch_in
from .trie import unpack

__all__ = ["Engine", "CorpusEngine", "make_engine", "make_corpus_engine", "match_batch",
           "match_pooled", "match_one", "match_batch_corpora", "match_pooled_corpora",
           "match_batch_windows", "POOL_ROWS"]

#: Rows of the output pool that stateful matches write into (see :class:`EngineBackend`).
POOL_ROWS = 256


@_structref.register
class _EngineType(_nbtypes.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, _nbtypes.unliteral(typ)) for name, typ in fields)


class Engine(_structref.StructRefProxy):
    """What a stateful match reads besides its inputs, as one Numba structure: unboxed in one
    step (measured: 0.2 us, against 0.8 us for the same arrays as loose arguments and
    tuples).  Fields: ``trie`` (:attr:`~ngramspec.engine.trie.TrieArrays.packed`), ``states``
    (plain :data:`~ngramspec.engine.match.States`), ``buf`` (tree scratch buffers), ``bc``
    (bucket counts), ``params`` (as :func:`match_batch` takes them) and the output pool
    ``tokens``/``mask``/``num`` (rows written by :func:`match_pooled`).  Built by
    :func:`make_engine`; a plain namespace where the JIT is off."""


_ENGINE_FIELDS = ("trie", "states", "buf", "bc", "params", "tokens", "mask", "num")
_structref.define_proxy(Engine, _EngineType, list(_ENGINE_FIELDS))


@jit
def _new_engine(trie, states, buf, bc, params, tokens, mask, num):
    return Engine(trie, states, buf, bc, params, tokens, mask, num)


@jit
def _set_pool(eng, tokens, mask, num):
    eng.tokens = tokens
    eng.mask = mask
    eng.num = num


def make_engine(*fields) -> Engine:
    """An :class:`Engine` of ``fields`` (in its field order)."""
    if getattr(_new_engine, "overloads", None) is None:  # NUMBA_DISABLE_JIT=1
        return SimpleNamespace(**dict(zip(_ENGINE_FIELDS, fields)))
    return _new_engine(*fields)


@_structref.register
class _CorpusEngineType(_nbtypes.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, _nbtypes.unliteral(typ)) for name, typ in fields)


class CorpusEngine(_structref.StructRefProxy):
    """The loaded corpora as a stateful match with corpora reads them, one Numba structure
    beside :class:`Engine` (measured: the same arrays as loose arguments and tuples cost 2.5 us
    of unboxing per call).  Fields: ``pool``, ``cp``, ``cs`` and ``walks`` as
    :func:`~ngramspec.engine.corpora.sam.corpus_row` takes them (``cs`` the raw buffers of
    :func:`~ngramspec.engine.corpora.sam.corpus_scratch`), and ``budget``, the trie's part of each tree.
    Built by :func:`make_corpus_engine`; a plain namespace where the JIT is off."""


_CORPUS_FIELDS = ("pool", "cp", "cs", "walks", "budget")
_structref.define_proxy(CorpusEngine, _CorpusEngineType, list(_CORPUS_FIELDS))


@jit
def _new_corpus_engine(pool, cp, cs, walks, budget):
    return CorpusEngine(pool, cp, cs, walks, budget)


def make_corpus_engine(*fields) -> CorpusEngine:
    """A :class:`CorpusEngine` of ``fields`` (in its field order)."""
    if getattr(_new_corpus_engine, "overloads", None) is None:  # NUMBA_DISABLE_JIT=1
        return SimpleNamespace(**dict(zip(_CORPUS_FIELDS, fields)))
    return _new_corpus_engine(*fields)


@jit_inline
def _anchors(ctx, row, total, stateless, max_depth, t, st, sc):
    """The anchors of one request into ``sc`` (a stateless match first forgets the row's
    state: fresh anchors of ``ctx`` alone); returns their count."""
    if stateless:
        st.epoch[row] = 0
        st.ptl[row] = 0
        st.n[row] = 0
        total = ctx.size
    return match_anchors(ctx, total, row, max_depth, t, st, sc.m_scratch, sc.a_nodes,
                         sc.a_depths)


@jit_inline
def _draft(ctx, count, top, steps, params, t, sc, bucket_counts, out_tokens, out_mask):
    """Build one request's tree from the ``count`` anchors in ``sc`` and lay it out; returns
    the drafted node count.  ``top``/``steps``: the BFS breadth schedule
    (:func:`~ngramspec.engine.tree.build_bfs_scheduled`)."""
    _, min_b, max_b, budget, prob_mode = params
    if prob_mode:
        used = build_prob(count, budget, max_b, t, sc, bucket_counts)
    else:
        used = build_bfs_scheduled(count, budget, top, steps, min_b, max_b, t, sc,
                                   bucket_counts)
    fill_result(ctx[ctx.size - 1], budget + 1, sc, out_tokens, out_mask)
    return used


@jit(what="the batched trie match and draft-tree kernel")
def match_batch(flat, offsets, state_rows, total_lens, stateless, params, trie, states,
                bucket_counts, buf, out_tokens, out_mask, out_num):
    """SGLang 0.5.23's ``batchMatch``: stateful (or, with ``stateless``, fresh) anchors per
    request, one shared-budget tree each, in batch order.  ``params``: ``(max_depth, min_b,
    max_b, budget, prob_mode)``; ``trie``: :attr:`~ngramspec.engine.trie.TrieArrays.packed`;
    ``states``: a plain bundle; ``buf``: the tree scratch
    (:func:`~ngramspec.engine.tree.scratch_in`)."""
    _match_rows(flat, offsets, state_rows, total_lens, stateless, params, trie, states,
                bucket_counts, buf, out_tokens, out_mask, out_num)


@jit(what="the batched trie match and draft-tree kernel")
def match_pooled(flat, offsets, state_rows, total_lens, stateless, eng, at):
    """:func:`match_batch` on the arrays of ``eng`` (:class:`Engine`), the drafts written to
    its pool rows ``at .. at + batch``."""
    end = at + offsets.size - 1
    _match_rows(flat, offsets, state_rows, total_lens, stateless, eng.params, eng.trie,
                eng.states, eng.bc, eng.buf, eng.tokens[at:end], eng.mask[at:end],
                eng.num[at:end])


@jit(what="the trie match and draft-tree kernel")
def match_one(ctx, row, total, stateless, eng, at):
    """:func:`match_pooled` of one request (state row ``row``, total length ``total``): no
    offsets, rows or lengths arrays to build and unbox."""
    t = unpack(eng.trie)
    st = States(*eng.states)
    params = eng.params
    max_depth, _, max_b, budget, _ = params
    sc = scratch_in(eng.buf, budget, max_depth, max_b)
    mmd = max(1, max_depth - 1)
    count = _anchors(ctx, row, total, stateless, max_depth, t, st, sc)
    eng.num[at] = _draft(ctx, count, mmd, mmd, params, t, sc, eng.bc, eng.tokens[at],
                         eng.mask[at])


@jit_inline
def _match_rows(flat, offsets, state_rows, total_lens, stateless, params, trie, states,
                bucket_counts, buf, out_tokens, out_mask, out_num):
    t = unpack(trie)
    st = States(*states)
    max_depth, _, max_b, budget, _ = params
    sc = scratch_in(buf, budget, max_depth, max_b)
    mmd = max(1, max_depth - 1)
    for b in range(offsets.size - 1):
        ctx = flat[offsets[b]:offsets[b + 1]]
        row = state_rows[b]
        total = total_lens[b]
        count = _anchors(ctx, row, total, stateless, max_depth, t, st, sc)
        out_num[b] = _draft(ctx, count, mmd, mmd, params, t, sc, bucket_counts, out_tokens[b],
                            out_mask[b])


@jit(what="the match kernel with external corpora")
def match_batch_corpora(flat, offsets, state_rows, total_lens, stateless, params, trie, states,
                        bucket_counts, buf, pool, cp, cs, walks, sel, sam_budget,
                        out_tokens, out_mask, out_num):
    """:func:`match_batch` with external corpora (spec §3.6.7), one call per batch: per
    request the trie's tree with the reduced budget ``params[3]``, drafted into ``cs``'s trie
    row, then every corpus's tree merged in
    (:func:`~ngramspec.engine.corpora.sam.corpus_row`; ``pool``, ``cp``, ``cs``, ``walks`` as it
    takes them; stateless matching uses no walk row).

    ``sel`` (int32, requests x corpora; no columns: every request draws from every corpus):
    request ``b`` draws from the corpora ``k`` with ``sel[b, k] != 0`` only, split as SGLang
    splits over the loaded corpora (``sam_budget``: ``external_sam_budget``): per corpus
    ``min(sam_budget, n - 1) // k_b``, the trie the rest, the trie alone with the whole
    budget when that is 0 or no corpus is chosen.  ``trie``: as :func:`match_batch`."""
    t = unpack(trie)
    st = States(*states)
    cs = corpus_scratch_in(cs)
    max_depth, min_b, max_b, budget, prob_mode = params
    full = cp[1] - 1
    sc = scratch_in(buf, budget, max_depth, max_b)
    mmd = max(1, max_depth - 1)
    per = cp[0]
    tb = budget
    selecting = sel.shape[1] > 0
    row_sel = sel[0]
    for b in range(offsets.size - 1):
        ctx = flat[offsets[b]:offsets[b + 1]]
        row = state_rows[b]
        total = total_lens[b]
        count = _anchors(ctx, row, total, stateless, max_depth, t, st, sc)
        if selecting:
            row_sel = sel[b]
            chosen = 0
            for k in range(row_sel.size):
                if row_sel[k] != 0:
                    chosen += 1
            per = min(sam_budget, full) // chosen if chosen else 0
            tb = full - per * chosen if per else full
            sc = scratch_in(buf, tb, max_depth, max_b)
        # One tree-building call site (each is compiled inline: a second doubled the cold
        # compile): into the result when no corpus is drawn from, else into the trie's row.
        if per == 0:  # no corpus for this request: the trie alone, as without corpora
            p_tokens, p_mask = out_tokens[b], out_mask[b][:, :]
        else:
            m = tb + 1
            p_tokens, p_mask = cs[0][:m], cs[1][:m, :m]
        used = _draft(ctx, count, mmd, mmd, (max_depth, min_b, max_b, tb if per else full,
                                             prob_mode), t, sc, bucket_counts, p_tokens, p_mask)
        if per == 0:
            out_num[b] = used
            continue
        out_num[b] = corpus_row(ctx, pool, cp, cs, per, row_sel, p_tokens, p_mask,
                                out_tokens[b], out_mask[b], cs[0][:0], walks,
                                -1 if stateless else row, total)


@jit(what="the match kernel with external corpora")
def match_pooled_corpora(flat, offsets, state_rows, total_lens, eng, ce, at):
    """:func:`match_batch_corpora` of a packed batch (``flat``/``offsets``, ``state_rows``,
    ``total_lens`` as :func:`match_batch` takes them) on the arrays of ``eng``
    (:class:`Engine`) and ``ce`` (:class:`CorpusEngine`), every corpus drawn from, the drafts
    written to ``eng``'s pool rows ``at .. at + batch``.  (One kernel for batch 1 too: a
    second, scalar one cost a minute more of compiling for 0.3 us per call.)"""
    for b in range(offsets.size - 1):
        _corpus_rows(flat[offsets[b]:offsets[b + 1]], state_rows[b], total_lens[b], eng, ce,
                     at + b)


@jit_inline
def _corpus_rows(ctx, row, total, eng, ce, at):
    """One request of :func:`match_pooled_corpora` (corpora active: ``ce.cp[0]``, the budget
    per corpus, at least 1; one tree-building call site, as each is compiled inline)."""
    t = unpack(eng.trie)
    st = States(*eng.states)
    max_depth, min_b, max_b, _, prob_mode = eng.params
    cp = ce.cp
    per = cp[0]
    tb = ce.budget
    sc = scratch_in(eng.buf, tb, max_depth, max_b)
    mmd = max(1, max_depth - 1)
    count = _anchors(ctx, row, total, False, max_depth, t, st, sc)
    cs = corpus_scratch_in(ce.cs)
    m = tb + 1
    p_tokens, p_mask = cs[0][:m], cs[1][:m, :m]
    _draft(ctx, count, mmd, mmd, (max_depth, min_b, max_b, tb, prob_mode), t, sc, eng.bc,
           p_tokens, p_mask)
    none = cs[0][:0]  # every corpus drawn from; no sources kept
    eng.num[at] = corpus_row(ctx, ce.pool, cp, cs, per, none, p_tokens, p_mask,
                             eng.tokens[at], eng.mask[at], none, ce.walks, row, total)


@jit(what="the window-era match kernel")
def match_batch_windows(flat, offsets, min_w, max_w, params, trie, bucket_counts, buf,
                        out_tokens, out_mask, out_num):
    """SGLang 0.5.9's ``batchMatch``: stateless match windows ``min_w .. max_w`` per request
    (``params[0]`` = ``branch_length``), one shared-budget tree each, in batch order."""
    t = unpack(trie)
    max_depth, _, max_b, budget, _ = params
    sc = scratch_in(buf, budget, max_depth, max_b)
    steps = max_w - min_w + 1
    for b in range(offsets.size - 1):
        ctx = flat[offsets[b]:offsets[b + 1]]
        count = window_anchors(ctx, min_w, max_w, t, sc.a_nodes, sc.a_depths)
        out_num[b] = _draft(ctx, count, max_w, steps, params, t, sc, bucket_counts,
                            out_tokens[b], out_mask[b])
