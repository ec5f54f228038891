"""External corpora on flat arrays: suffix-automaton build, BFS/PROB corpus trees, the merge.

The Numba twin of :mod:`ngramspec.reference.sam` (spec §3.6), tested equal to it.

An automaton (:class:`FlatAutomaton`) is four int32 record arrays, built once per corpus, so
that a walk step, an anchor or a tree node reads a state in one place:

- ``states`` ``(S, 4)``, per state ``s``: the start of its range in the edge arrays, twice its
  transition count plus 1 if one of them is the separator, ``length`` (longest string) and
  ``link`` (suffix link, -1 at the root);
- ``edges`` ``(E, 2)``: (token, target) sorted by token in each state's range (lookup by
  binary search; the separator ``INT32_MIN``, the smallest token, comes first);
- ``kids`` ``(E, 2)`` (PROB ``(E, 3)``): the children that drafts use, separator left out, in
  the order of the cache's match type (BFS: last occurrence descending; PROB: occurrences
  descending, then token), from the start of the range: (token, target[, occurrences]);
- ``root`` ``(H, 2)``: the root's transitions again, (token, target) in an open-addressing
  hash table at most half full (target -1: empty), since a walk falls back to the root often
  and the root has a transition per distinct token.

The build and the walk are in :mod:`ngramspec.engine.corpora.automaton`, the corpus trees and the
merge in :mod:`ngramspec.engine.corpora.corpus_tree`; this module holds the automaton object, the pool
and one request's corpus part.  The match kernels take every
loaded corpus in one pool (:func:`automata_pool`: the records concatenated, and where each
automaton starts), so that their argument types do not depend on the number of corpora.  The
draft trees keep their children in libstdc++ ``unordered_map`` order
(:mod:`ngramspec.engine.tree`'s model and layout).

Matching: :func:`corpus_row` is one request's corpus part (every corpus's tree merged in turn
into the trie's), called per request by the backend's fused kernel
(``engine.backend.match_batch_corpora``) and by the compiled replay
(:func:`draft_with_corpora`); it continues each row's last walk through the automata when the
window allows it (see its docstring).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..._jit import jit, jit_inline
from .automaton import SEPARATOR, _build_kernel, _chain, _extend
from .corpus_tree import (_TREE_ROWS, _bfs, _draft_kernel, _fill, _insert_paths, _layout,
                          _mask_parents, _prob, _tree_reset, merge_batch)
from ..tree import build_bfs_scheduled, build_prob, fill_result

__all__ = ["FlatAutomaton", "merge_batch", "automata_pool", "corpus_row",
           "corpus_scratch", "corpus_scratch_in", "corpus_walks", "grow_walks",
           "draft_with_corpora", "replay_corpora", "SEPARATOR"]


def corpus_scratch(per: int, n: int, trie_budget: int, max_depth: int, max_breadth: int,
                   prob: bool, max_kids: int) -> tuple:
    """Work arrays of :func:`corpus_row` (``per`` nodes per corpus tree at most, ``n`` merged
    slots, the trie's ``trie_budget + 1`` slots at most), allocated once per corpus set and
    reused: three flat buffers and their sizes, which :func:`corpus_scratch_in` slices (a
    kernel call then unboxes four arrays, not thirty)."""
    m = per + 1
    big = max(n, trie_budget + 1)
    top_k = min(max_breadth, max(1, max_kids))
    heap = top_k * (max_depth + 1) * (2 * m + 2) + 1 if prob else 1
    t1 = trie_budget + 1
    dims = np.array([m, n, t1, big, max_depth + 1, heap], np.int64)
    n32 = t1 + _TREE_ROWS * m + (m + 1) + 2 * m + _TREE_ROWS * n + (n + 1) + 4 * big \
        + 2 * (max_depth + 1) + 2 * (m + 1) + 3 * heap
    return (np.zeros(n32, np.int32), np.zeros(m + 1 + heap), np.zeros(t1 * t1 + big, np.bool_),
            dims)


@jit
def corpus_scratch_in(bufs):
    """The named work arrays of :func:`corpus_row`, slices of :func:`corpus_scratch`'s
    buffers (the trie row ``cs[0]``/``cs[1]`` first, the result's slot parents ``cs[9]``)."""
    b32, bf, bb, dims = bufs
    m, n, t1, big, d1, heap = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
    at = 0
    p_tok = b32[at:at + t1]
    at += t1
    c_tree = b32[at:at + _TREE_ROWS * m].reshape((_TREE_ROWS, m))
    at += _TREE_ROWS * m
    c_order = b32[at:at + m + 1]
    at += m + 1
    c_tok, c_par = b32[at:at + m], b32[at + m:at + 2 * m]
    at += 2 * m
    tree = b32[at:at + _TREE_ROWS * n].reshape((_TREE_ROWS, n))
    at += _TREE_ROWS * n
    order = b32[at:at + n + 1]
    at += n + 1
    r_tok, r_par = b32[at:at + big], b32[at + big:at + 2 * big]
    new_idx, chain = b32[at + 2 * big:at + 3 * big], b32[at + 3 * big:at + 4 * big]
    at += 4 * big
    a_state, a_len = b32[at:at + d1], b32[at + d1:at + 2 * d1]
    at += 2 * d1
    q_par, q_state = b32[at:at + m + 1], b32[at + m + 1:at + 2 * m + 2]
    at += 2 * m + 2
    h_o, h_par, h_kid = (b32[at:at + heap], b32[at + heap:at + 2 * heap],
                         b32[at + 2 * heap:at + 3 * heap])
    q_breadth, h_p = bf[:m + 1], bf[m + 1:m + 1 + heap]
    p_mask = bb[:t1 * t1].reshape((t1, t1))
    is_parent = bb[t1 * t1:t1 * t1 + big]
    return (p_tok, p_mask, c_tree, c_order, c_tok, c_par, tree, order, r_tok, r_par, is_parent,
            new_idx, chain, a_state, a_len, q_par, q_breadth, q_state, h_p, h_o, h_par, h_kid)


def corpus_walks(rows: int, max_depth: int, corpora: int) -> np.ndarray:
    """Per match-state row, the last corpus walk (:func:`corpus_row`), one int64 row each so
    that a match reads one place: the window's length, the total length it was sent with (-1:
    none), the window (the context's last ``max_depth`` tokens), then per corpus the walk's
    end state and matched length (``-1``: unknown)."""
    walks = np.zeros((rows, 2 + max_depth + 2 * corpora), np.int64)
    walks[:, 1] = -1
    return walks


def grow_walks(walks: np.ndarray, rows: int) -> np.ndarray:
    """``walks`` with at least ``rows`` rows (the old rows kept, the new ones without a
    walk)."""
    if walks.shape[0] >= rows:
        return walks
    grown = np.zeros((rows, walks.shape[1]), np.int64)
    grown[:, 1] = -1
    grown[:walks.shape[0]] = walks
    return grown


@jit_inline
def _walk_start(ctx, max_depth, walks, row, total):
    """How many of the window's tokens a walk may skip: ``keep`` when the window
    ``ctx[-max_depth:]`` is the last ``keep`` tokens of the row's last window followed by the
    ``total - last total`` tokens appended since, else -1.  The check is on content, so a
    stale or foreign row is only reused when its walk is the walk of these very tokens."""
    w_tot = walks[row, 1]
    if w_tot < 0:
        return -1
    w_len = walks[row, 0]
    size = min(ctx.size, max_depth)
    keep = size - (total - w_tot)
    if keep < 0 or keep > size or keep > w_len:
        return -1
    base = ctx.size - size
    old = 2 + w_len - keep
    for i in range(keep):
        if ctx[base + i] != walks[row, old + i]:
            return -1
    return keep


@jit
def corpus_row(ctx, pool, cp, cs, per, sel, p_tokens, p_mask, out_tokens, out_mask,
               out_source, walks, row, total):
    """One request's corpus part of SGLang's ``batchMatch`` (§3.6.7): each corpus of
    ``pool`` (:func:`automata_pool`, merge order) drafts ``per`` nodes, merged in turn into
    the trie's laid-out tree ``p_tokens``/``p_mask`` (``trie_budget + 1`` slots); the result
    fills ``out_tokens``/``out_mask`` (``n`` slots).  ``cp``: ``(per, n, max_depth, min_b,
    max_b, prob)`` (this call's per-corpus budget is ``per``); ``cs``: :func:`corpus_scratch`;
    ``sel``: the corpora this request draws from (``sel[k] != 0``; empty: all, and at least
    one is chosen).  Returns the drafted node count.  Between merges the trees stay as tokens
    and parent slots; only the last one writes a mask.

    ``out_source`` (int32; empty: nothing more is done, as on the match path): ``3 * n``
    long, ``out_source[:n]`` receives per slot the part of the merge that created its node,
    0 for the trie's tree (and the root and the padding), ``k + 1`` for corpus ``k`` of
    ``pool``; the rest is work space.  A node two parts proposed belongs to the first merged:
    the trie's tree first, then the corpora in merge order.

    ``walks`` (:func:`corpus_walks`; ``row`` < 0: none): SGLang walks the last
    ``max_depth`` tokens through every automaton on each match; a walk's end depends only on
    those tokens, so when the row's last window plus the appended tokens contains this one
    (checked token by token), the last walk is continued over the appended tokens and cut to
    the window, which gives the same end (a corpus left out leaves its walk unknown)."""
    _, n, max_depth, min_b, max_b, prob = cp
    (_, _, c_tree, c_order, c_tok, c_par, tree, order, r_tok, r_par, is_parent, new_idx, chain,
     a_state, a_len, q_par, q_breadth, q_state, h_p, h_o, h_par, h_kid) = cs
    # Sources: node i's in out_source[n + i], the laid-out slots' between merges in
    # out_source[2 * n:]; a merge creates its nodes in cursor order, the primary's first.
    keep_src = out_source.size > 0
    merged = False  # the primary is the trie's tree (source 0), later the last merge
    st, ed, kd, rt, bases = pool
    last = ctx[ctx.size - 1]
    m = per + 1
    rm = p_tokens.size
    _mask_parents(p_mask, rm, r_par)
    r_tok[1:rm] = p_tokens[1:rm]
    size = min(ctx.size, max_depth)
    keep = -1 if row < 0 else _walk_start(ctx, max_depth, walks, row, total)
    cursor = 1
    n_corpora = bases.shape[0]
    w_s = 2 + max_depth  # the walks' columns of the end states, then of the lengths
    w_m = w_s + n_corpora
    k_last = n_corpora - 1
    if sel.size:
        while sel[k_last] == 0:
            k_last -= 1
    for k in range(k_last + 1):
        if sel.size and sel[k] == 0:
            if row >= 0:
                walks[row, w_m + k] = -1
            continue
        sb, eb, rb, rmask = bases[k, 0], bases[k, 1], bases[k, 2], bases[k, 3]
        if keep < 0 or walks[row, w_m + k] < 0:
            s, sm = _extend(ctx, ctx.size - size, 0, 0, st, ed, rt, sb, eb, rb, rmask)
        else:
            s, sm = _extend(ctx, ctx.size - size + keep, walks[row, w_s + k],
                            walks[row, w_m + k], st, ed, rt, sb, eb, rb, rmask)
            if sm > size:  # cut to the window: the state of its suffix of that length
                sm = size
                while s > 0 and st[sb + st[sb + s, 3], 2] >= sm:
                    s = st[sb + s, 3]
        if row >= 0:
            walks[row, w_s + k] = s
            walks[row, w_m + k] = sm
        count = _chain(s, sm, st, sb, a_state, a_len)
        if prob:
            _prob(a_state, count, per, max_b, st, kd, sb, eb, c_tree, c_order, h_p, h_o, h_par,
                  h_kid)
        else:
            _bfs(a_state, a_len, count, per, max_depth, min_b, max_b, st, kd, sb, eb, c_tree,
                 c_order, q_par, q_breadth, q_state)
        _layout(m, c_tree, c_order, c_tok, c_par)
        _tree_reset(tree)
        cursor = _insert_paths(r_tok, r_par, rm, tree, order, is_parent, new_idx, chain, 1, n,
                               False)
        if keep_src:
            if merged:  # each node from its slot (new_idx: slot -> node, -1: not inserted)
                for i in range(1, rm):
                    if new_idx[i] > 0:
                        out_source[n + new_idx[i]] = out_source[2 * n + i]
            else:
                for i in range(1, cursor):
                    out_source[n + i] = 0
        first_new = cursor
        cursor = _insert_paths(c_tok, c_par, m, tree, order, is_parent, new_idx, chain, cursor,
                               n, True)
        if keep_src:
            for i in range(first_new, cursor):
                out_source[n + i] = k + 1
        if k == k_last:
            _fill(last, n, tree, order, r_par, out_tokens, out_mask)
            if keep_src:  # slot i holds node order[i - 1] (the fill's queue)
                out_source[0] = 0
                for i in range(1, cursor):
                    out_source[i] = out_source[n + order[i - 1]]
                for i in range(cursor, n):
                    out_source[i] = 0
        else:
            _layout(n, tree, order, r_tok, r_par)
            if keep_src:  # the slots' sources, for the next merge
                for i in range(1, cursor):
                    out_source[2 * n + i] = out_source[n + order[i - 1]]
            merged = True
            rm = n
    if row >= 0:
        base = ctx.size - size
        for i in range(size):
            walks[row, 2 + i] = ctx[base + i]
        walks[row, 0] = size
        walks[row, 1] = total
    return cursor - 1


@jit
def draft_with_corpora(ctx, count, row, total, prob, top, steps, min_b, max_b, t, sc,
                       bucket_counts, corpora, cs, out_tokens, out_mask, out_source):
    """One request's draft with corpora for the compiled replay, from the trie anchors
    already in ``sc`` (``count`` of them): the trie's tree with the reduced budget, then
    :func:`corpus_row`.  ``corpora``: ``(pool, cp, scratch buffers, walks, trie_budget)``
    (:func:`replay_corpora`); ``cs``: :func:`corpus_scratch_in` of its buffers;
    ``out_source``: as :func:`corpus_row`.  Returns the drafted node count; the slot parents
    of the result are then in ``cs[9]``."""
    pool, cp, _, walks, trie_budget, _ = corpora
    if prob:
        build_prob(count, trie_budget, max_b, t, sc, bucket_counts)
    else:
        build_bfs_scheduled(count, trie_budget, top, steps, min_b, max_b, t, sc, bucket_counts)
    m = trie_budget + 1
    p_tokens, p_mask = cs[0][:m], cs[1][:m, :m]
    fill_result(ctx[ctx.size - 1], m, sc, p_tokens, p_mask)
    return corpus_row(ctx, pool, cp, cs, cp[0], cs[0][:0], p_tokens, p_mask, out_tokens,
                      out_mask, out_source, walks, row, total)


def replay_corpora(automata: Sequence["FlatAutomaton"], per: int, trie_budget: int, *, n: int,
                   max_depth: int, min_breadth: int, max_breadth: int, prob: bool,
                   rows: int, requests: int = 0) -> tuple:
    """The corpora as the compiled replay takes them (``automata``: at least one, in merge
    order; ``per`` >= 1 nodes each; without corpora the replay takes None).  The last item
    counts accepted draft tokens per request (``requests`` rows) by source: column 0 the
    trie's tree, ``k + 1`` corpus ``k`` (:func:`corpus_row`'s ``out_source``)."""
    if not automata or per < 1:
        raise ValueError("replay_corpora needs at least one automaton and a budget >= 1")
    sources = len(automata) + 1
    cp = (int(per), int(n), int(max_depth), int(min_breadth), int(max_breadth), bool(prob))
    cs = corpus_scratch(max(per, 1), n, trie_budget, max_depth, max_breadth, prob,
                        max(a.max_kids for a in automata))
    return (automata_pool(automata), cp, cs, corpus_walks(rows, max_depth, len(automata)),
            int(trie_budget), np.zeros((requests, sources), np.int64))


def automata_pool(automata: Sequence["FlatAutomaton"], *, adopt: bool = False) -> tuple:
    """The automata's records in one set of arrays, as the match kernels take them (the same
    types whatever the number of corpora): ``(states, edges, kids, root, bases)``, where row
    ``k`` of ``bases`` holds where automaton ``k`` (merge order) starts in ``states``, in
    ``edges``/``kids`` and in ``root``, and its root table's size - 1.  ``adopt``: the
    automata then keep views into the pool instead of their own arrays (memory held once).
    All built for the same match type."""
    if not automata:
        raise ValueError("automata_pool needs at least one automaton")
    widths = {a.kids.shape[1] for a in automata}
    if len(widths) != 1:
        raise ValueError("the automata are built for different match types (BFS and PROB)")
    bases = np.zeros((len(automata), 4), np.int64)
    at = np.zeros(3, np.int64)
    for k, a in enumerate(automata):
        bases[k, :3] = at
        bases[k, 3] = a.root.shape[0] - 1
        at += (a.states.shape[0], a.edges.shape[0], a.root.shape[0])
    if len(automata) == 1:
        a = automata[0]
        return a.states, a.edges, a.kids, a.root, bases
    pool = tuple(np.concatenate([getattr(a, f) for a in automata])
                 for f in ("states", "edges", "kids", "root"))
    if adopt:
        for (sb, eb, rb, _), a in zip(bases.tolist(), automata):
            a.states, a.edges, a.kids, a.root = (
                pool[0][sb:sb + a.states.shape[0]], pool[1][eb:eb + a.edges.shape[0]],
                pool[2][eb:eb + a.edges.shape[0]], pool[3][rb:rb + a.root.shape[0]])
    return pool + (bases,)


# The largest stream an automaton takes: its state, edge and count fields are int32.
_MAX_STREAM = (2**31 - 5) // 3


class FlatAutomaton:
    """One corpus's suffix automaton as records (see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> sam = FlatAutomaton.build(np.array([5, 6, 5, 7, 5, 6, 5, 6], np.int32), prob=True)
    >>> tokens, mask = sam.draft_batch([np.array([5], np.int32)], 4, max_depth=4,
    ...                                min_breadth=1, max_breadth=2, prob=True)
    >>> tokens.tolist()
    [[5, 6, 5, 7, 6]]
    """

    __slots__ = ("states", "edges", "kids", "root", "max_kids", "prob")

    def __init__(self, arrays: tuple, prob: bool) -> None:
        self.states, self.edges, self.kids, self.root, max_kids = arrays
        self.max_kids = int(max_kids)
        self.prob = bool(prob)

    @classmethod
    def build(cls, stream: np.ndarray, *, prob: bool) -> "FlatAutomaton":
        """The automaton of an int32 token stream; ``prob`` orders children for PROB
        (occurrences) instead of BFS (last occurrence)."""
        stream = np.ascontiguousarray(stream, dtype=np.int32)
        if stream.size > _MAX_STREAM:
            raise ValueError(f"a corpus stream of {stream.size} tokens is longer than an "
                             f"automaton takes ({_MAX_STREAM})")
        return cls(_build_kernel(stream, bool(prob)), prob)

    def own(self) -> None:
        """Hold copies of the records if they are views into a pool (:func:`automata_pool`
        with ``adopt``), so that the pool can be freed."""
        # A view into a pool has an array as its base (own records: none, or the kernel's
        # memory owner).
        if isinstance(self.states.base, np.ndarray):
            self.states, self.edges, self.kids, self.root = (
                self.states.copy(), self.edges.copy(), self.kids.copy(), self.root.copy())

    def arrays(self) -> tuple:
        """The records: ``(states, edges, kids, root)``."""
        return self.states, self.edges, self.kids, self.root

    @property
    def n_states(self) -> int:
        return int(self.states.shape[0])

    def nbytes(self) -> int:
        """Bytes held by the records."""
        return int(self.states.nbytes + self.edges.nbytes + self.kids.nbytes
                   + self.root.nbytes)

    def draft_batch(self, contexts: Sequence[np.ndarray], budget: int, *, max_depth: int,
                    min_breadth: int, max_breadth: int,
                    prob: bool) -> tuple[np.ndarray, np.ndarray]:
        """This corpus's tree for each context: tokens ``(B, budget + 1)`` and masks."""
        if bool(prob) != self.prob:
            raise ValueError("this automaton orders its children for "
                             f"{'PROB' if self.prob else 'BFS'}")
        count = len(contexts)
        offsets = np.zeros(count + 1, np.int64)
        np.cumsum([c.size for c in contexts], out=offsets[1:])
        flat = (np.concatenate(contexts) if count else np.zeros(0, np.int32)).astype(
            np.int32, copy=False)
        n = budget + 1
        tokens = np.empty((count, n), np.int32)
        mask = np.empty((count, n, n), np.bool_)
        _draft_kernel(flat, offsets, budget, max_depth, min_breadth, max_breadth, bool(prob),
                      self.states, self.edges, self.kids, self.root, self.max_kids, tokens,
                      mask)
        return tokens, mask
