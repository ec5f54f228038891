"""ADAPTIVE draft-tree kernel (ngramspec's own mode; the readable model and the rules are in
:mod:`ngramspec.reference.adaptive`).

Up to two sources (a request's own trie or own index, then the shared trie) are given as
their arrays; the shared trie's anchors are walked from the root, the own index's found from
its tail state by suffix links (:mod:`~.own_index`).  The candidate
heap (the engine's one, :mod:`~ngramspec.engine.heap`) is preallocated to its bound and keyed
by (probability descending, push order ascending): all keys differ, so any correct heap pops
in the reference's order.

The estimates (count ratios, or :func:`cond_estimate` with a calibration table) and the size
chosen after construction (:func:`keeps_tree` for a fixed ``min_expected_accept``;
:func:`save_creation`, :func:`choose_cap` and :func:`layout_prefix` for ``"auto"``) are
separate functions of their own.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .._jit import jit
from .heap import heap_pop, heap_push
from .serving.own_index import (E_NEXT, E_TO, E_TOK, O_TAIL, O_TAIL_LEN, S_CNT, S_HEAD, S_LAST,
                        own_state_of)
from .tree import TREE_ROWS, _map_insert, _tree_reset, fill_result
from .trie import Trie, find_child

__all__ = ["AdaptiveScratch", "adaptive_scratch", "draft_adaptive", "draft_adaptive_saved",
           "choose_cap", "layout_prefix", "cond_estimate"]

#: Work arrays of one ADAPTIVE tree: anchors, the tree (as in :data:`~.tree.Scratch`) with
#: ``t_prob`` per node, ``slot_parent``, the top-children list ``k_p``/``k_node``, the
#: candidate heap ``h_p``/``h_o``/``h_par``/``h_node`` (probability, push order, tree parent,
#: trie node), ``t_lvl``, the tree level of each tree node, and ``k_key``: the top list's
#: tie keys (recency).
AdaptiveScratch = namedtuple("AdaptiveScratch", "a_nodes a_depths tree order t_prob "
                                                "slot_parent k_p k_node h_p h_o h_par h_node "
                                                "t_lvl k_key")


@jit
def adaptive_scratch(budget, max_depth):
    """Work arrays for one request at a time.

    Heap bound, per anchor: below an anchor each trie node maps to one tree position, so a pop
    either creates a node (at most ``budget``) or merges into an existing one (at most
    ``budget``), plus the pop that ends the anchor; each pop pushes at most ``budget``
    children, and the anchor itself pushes ``budget``.
    """
    n = budget + 1
    cap = (2 * budget + 2) * budget + 16
    return AdaptiveScratch(
            np.empty(max_depth, np.int32), np.empty(max_depth, np.int32),  # anchors
            np.empty((TREE_ROWS, n), np.int32), np.empty(n, np.int32),  # tree, order
            np.empty(n, np.float64), np.empty(n, np.int32),  # t_prob, slot parents
            np.empty(max(budget, 1), np.float64), np.empty(max(budget, 1), np.int32),  # top kids
            np.empty(cap, np.float64), np.empty(cap, np.int64), np.empty(cap, np.int32),
            np.empty(cap, np.int32),  # heap: p, order, tree parent, trie node
            np.zeros(n, np.int32),  # tree levels
            np.zeros(max(budget, 1), np.int64))  # top kids' tie keys


@jit
def _trie_depth(par, node):
    d = 0
    while node != 0:
        node = par[node]
        d += 1
    return d


@jit
def cond_estimate(cal, src, ctx_len, level, total, rank, freq):
    """The calibrated probability of a child (:mod:`ngramspec.config.acceptance_table`: the table ``cal``,
    the source ``src`` (0 own trie, 1 shared), the matched length, the parent's level below
    its anchor (``level``: the drafted nodes the path has confirmed before the child), the
    parent's count total, the child's rank among its siblings and its count), clipped to
    [0, 1]."""
    nc = int(cal[0])
    nt = int(cal[1])
    nl = int(cal[2])
    ci = 0
    while ci + 1 < nc and cal[4 + ci] <= ctx_len:
        ci += 1
    ti = 0
    while ti + 1 < nt and cal[4 + nc + ti] <= total:
        ti += 1
    li = 0
    while li + 1 < nl and cal[4 + nc + nt + li] <= level:
        li += 1
    at = 3 + nc + nt + nl + ((((src * nc + ci) * nt + ti) * nl + li) * 2 + min(rank, 1)) * 2
    q = cal[at] + cal[at + 1] * (float(freq) / float(total))
    return min(1.0, max(0.0, q))


@jit
def _top_insert(k_p, k_node, k_key, kept, budget, p, node, key):
    """Insert a child into the sorted top list (``kept`` long, at most ``budget``): by
    probability, then ``key`` descending (an equal key stays behind).  Returns the new
    length."""
    j = kept
    while j > 0 and (k_p[j - 1] < p or (k_p[j - 1] == p and k_key[j - 1] < key)):
        j -= 1
    if j < budget:
        last = min(kept, budget - 1)
        for m in range(last, j, -1):
            k_p[m] = k_p[m - 1]
            k_node[m] = k_node[m - 1]
            k_key[m] = k_key[m - 1]
        k_p[j] = p
        k_node[j] = node
        k_key[j] = key
        if kept < budget:
            kept += 1
    return kept


@jit
def _expand_source(ctx, params, t, o, bucket_counts, sc, used, src, cal):
    """Expand the anchors of one source into the tree: the trie ``t``, or with ``o`` not None
    the request's own index ``o`` (:mod:`~.own_index`; ``t`` unread).  ``src``: 0 for the
    request's own trie or index (plain conditional frequencies), 1 for the shared trie (with
    its pseudo-count ``shared_pseudo_count``); ``cal``: the calibration table (empty: none).

    A candidate's node is a trie node, or for the own index a transition (its token and the
    state it reaches); a node of the own index lies ``d + level`` tokens deep (the anchor's
    length plus its tree level), and has no children at the trie depth, as in a trie."""
    max_depth, budget, min_prob, factor, _, shared_pseudo = params
    pseudo = shared_pseudo if src == 1 else 0.0
    (_, _, tree, order, t_prob, _, k_p, k_node, h_p, h_o, h_par, h_node, t_lvl, k_key) = sc
    t_tok, t_head, t_next = tree[0], tree[1], tree[2]
    tok, freq, c_head, c_next, ht, par = t.tok, t.freq, t.c_head, t.c_next, t.ht, t.par
    if o is not None:
        o_st, o_ed = o.st, o.ed
        tail, tail_len = o.meta[O_TAIL], o.meta[O_TAIL_LEN]
    # Every context suffix up to the trie depth that is a trie path with children, longest
    # first (0.5.9's window rule with the window 1..depth), found as it is reached: the limit
    # of an anchor only falls with its length, so once one is reached, every shorter anchor
    # would be skipped too and their walks are not needed.
    d_top = 0  # the longest anchor: the context's match length in this source
    for d in range(min(ctx.size, max_depth), 0, -1):
        limit = budget
        if factor > 0.0:
            limit = min(budget, max(1, int(factor * d)))
        if used >= limit:
            break
        if o is not None:
            # The state of the suffix of d tokens, by suffix links from the tail (deeper
            # suffixes than the tail's have no children: they reach the trie depth).
            node = own_state_of(o_st, tail, d) if d <= tail_len else -1
            if node == -1 or o_st[node, S_HEAD] == -1:
                continue
        else:
            # The walk, as the insert looks children up: below the root the first few
            # children first (deep nodes have one or two), then the child table.
            node = 0
            for k in range(ctx.size - d, ctx.size):
                node = find_child(ht, par, tok, c_head, c_next, node, ctx[k])
                if node == -1:
                    break
            if node == -1 or c_head[node] == -1:
                continue
        if d_top == 0:
            d_top = d
        size = 0
        pushes = 0
        pos = 0
        prob = 1.0
        while True:
            # Push the best `budget` children of `node` (probability, then recency: the trie
            # lists children most recent first, the own index has their last positions).
            # One pass over the children: their counts sum to the total's floor, and the
            # best are kept by count (a child's probability is its count times one factor
            # common to all, so the order is the same), their probabilities computed after.
            kept = 0
            s = 0
            rank = 0
            if o is not None:
                own_node = node if pos == 0 else o_ed[node, E_TO]  # a transition below
                total = 0
                if d + t_lvl[pos] < max_depth:  # (at the trie depth: no children)
                    total = o_st[own_node, S_CNT]
                    ch = o_st[own_node, S_HEAD]
                    while ch != -1:
                        target = o_ed[ch, E_TO]
                        cnt = o_st[target, S_CNT]
                        s += cnt
                        kept = _top_insert(k_p, k_node, k_key, kept, budget, float(cnt), ch,
                                           o_st[target, S_LAST])
                        ch = o_ed[ch, E_NEXT]
            else:
                total = freq[node] if freq[node] > 0 else 0
                ch = c_head[node]
                while ch != -1:
                    s += freq[ch]
                    # the list's order is the recency order
                    kept = _top_insert(k_p, k_node, k_key, kept, budget, float(freq[ch]), ch,
                                       -rank)
                    rank += 1
                    ch = c_next[ch]
            if s > total:
                total = s
            if total > 0:
                denom = float(total)
                if pseudo > 0.0:  # the context continued here: d tokens + the node's level
                    denom = float(total) + pseudo / float(d + t_lvl[pos])
                for j in range(kept):
                    k_p[j] = prob * k_p[j] / denom
                # The matched length the child continues, counted from the longest anchor.
                below = 0
                if cal.size:
                    below = t_lvl[pos] if o is not None else _trie_depth(par, node) - d
                for j in range(kept):
                    p = k_p[j]
                    if cal.size:
                        kid_freq = (o_st[o_ed[k_node[j], E_TO], S_CNT] if o is not None
                                    else freq[k_node[j]])
                        p = prob * cond_estimate(cal, src, below + d_top, below, total, j,
                                                 kid_freq)
                    heap_push(h_p, h_o, h_par, h_node, size, p, pushes, pos, k_node[j])
                    size += 1
                    pushes += 1
            if size == 0 or used >= limit:
                break
            prob, parent, node = h_p[0], h_par[0], h_node[0]
            heap_pop(h_p, h_o, h_par, h_node, size)
            size -= 1
            if prob <= 0.0 or prob < min_prob:
                break
            # The tree node of `node` below `parent` (the tree map's lookup, spelled out: no
            # reference counts per pop).
            tn = o_ed[node, E_TOK] if o is not None else tok[node]
            pos = t_head[parent]
            while pos != -1 and t_tok[pos] != tn:
                pos = t_next[pos]
            if pos == -1:
                used += 1
                pos = used
                _map_insert(parent, pos, tn, tree, bucket_counts, order)
                t_prob[pos] = prob
                t_lvl[pos] = t_lvl[parent] + 1
            elif prob > t_prob[pos]:
                t_prob[pos] = prob
    return used


@jit
def draft_tree(ctx, params, local, shared, bucket_counts, sc, out_tokens, out_mask, out_prob,
               cal, own=None):
    """One request's ADAPTIVE tree from the named tries ``local`` (searched first; None: no
    local trie) and ``shared``, laid out in SGLang's format; returns the drafted count.
    ``params``: ``(max_depth, budget, min_prob, factor, min_expected, shared_pseudo)``;
    ``cal``: the calibration table of :mod:`ngramspec.config.acceptance_table` (empty: probabilities from
    counts); ``own``: the request's own index (:data:`~.own_index.OwnIndex`, up to date with
    ``ctx``), searched first instead of ``local``."""
    min_expected = params[4]
    tree, order, t_prob = sc.tree, sc.order, sc.t_prob
    _tree_reset(tree)
    t_prob[0] = 1.0
    used = 0
    if own is not None:
        used = _expand_source(ctx, params, shared, own, bucket_counts, sc, used, 0, cal)
    elif local is not None:
        used = _expand_source(ctx, params, local, None, bucket_counts, sc, used, 0, cal)
    used = _expand_source(ctx, params, shared, None, bucket_counts, sc, used, 1, cal)
    if used > 0 and not keeps_tree(t_prob, used, min_expected):
        _tree_reset(tree)
        used = 0
    n = params[1] + 1
    fill_result(ctx[ctx.size - 1], n, sc, out_tokens, out_mask)
    out_prob[0] = 1.0
    for s in range(1, n):
        out_prob[s] = t_prob[order[s - 1]] if s <= used else 0.0
    return used


# --- the size of the tree, after construction ----------------------------------------------


@jit
def keeps_tree(t_prob, used, min_expected):
    """A fixed ``min_expected_accept``: the whole tree or nothing."""
    total = 0.0  # summed as the reference does: the probabilities, then 1 + the sum
    for i in range(1, used + 1):
        total += t_prob[i]
    return not (1.0 + total < min_expected)


@jit
def save_creation(sc, used, tok_row, par_row, prob_row):
    """Node ``1 .. used`` of the tree in ``sc`` (creation order: every prefix is a tree) as
    token, parent node and probability rows, for :func:`layout_prefix`."""
    tree, t_prob = sc.tree, sc.t_prob
    t_tok, t_head, t_next = tree[0], tree[1], tree[2]
    prob_row[0] = 1.0
    for p in range(used + 1):
        c = t_head[p]
        while c != -1:
            par_row[c] = p
            tok_row[c] = t_tok[c]
            prob_row[c] = t_prob[c]
            c = t_next[c]


@jit
def choose_cap(prob_rows, used, costs, rate):
    """The cap ``k`` on drafted nodes per request for one step of ``used.size`` requests
    (``prob_rows[b, i]``: node ``i`` of request ``b`` in creation order; ``costs[k]``: the
    step's time with trees of ``k`` drafts).  The batch expects ``E(k) = sum_b (1 +
    sum_{i <= min(k, used_b)} p_bi)`` tokens; the cap maximises ``E(k) - lam * costs[k]``,
    ``lam`` the expected tokens per unit of time of the steps so far (``rate``: their summed
    expected tokens and times, updated here; the decode rate before the first step), so that
    over the run the expected tokens per unit of time are the largest.  Ties go to the smaller
    cap."""
    nreq = used.size
    top = 0
    for b in range(nreq):
        top = max(top, used[b])
    lam = nreq * (rate[0] / rate[1]) if rate[1] > 0.0 else float(nreq) / costs[0]
    total = float(nreq)
    best = total - lam * costs[0]
    best_total = total
    cap = 0
    for k in range(1, top + 1):
        for b in range(nreq):
            if k <= used[b]:
                total += prob_rows[b, k]
        gain = total - lam * costs[k]
        if gain > best:
            best = gain
            best_total = total
            cap = k
    rate[0] += best_total
    rate[1] += costs[cap] * nreq
    return cap


@jit
def layout_prefix(last_token, k, tok_row, par_row, prob_row, sc, bucket_counts, out_tokens,
                  out_mask, out_prob):
    """Lay out the first ``k`` nodes of a saved tree (:func:`save_creation`): inserted again
    in creation order, the maps are those the construction had after its ``k``-th node."""
    tree, order, t_prob = sc.tree, sc.order, sc.t_prob
    _tree_reset(tree)
    for pos in range(1, k + 1):
        _map_insert(par_row[pos], pos, tok_row[pos], tree, bucket_counts, order)
        t_prob[pos] = prob_row[pos]
    n = out_tokens.size
    fill_result(last_token, n, sc, out_tokens, out_mask)
    out_prob[0] = 1.0
    for s in range(1, n):
        out_prob[s] = t_prob[order[s - 1]] if s <= k else 0.0


@jit(what="the ADAPTIVE draft-tree kernel")
def draft_adaptive(ctx, params, local, shared, bucket_counts, sc, out_tokens, out_mask,
                   out_prob, cal):
    """:func:`draft_tree` called from Python: ``local``/``shared`` are plain trie bundles
    (:attr:`~.trie.TrieArrays.bundle`; ``local`` None: no local trie), ``sc`` an
    :func:`adaptive_scratch`."""
    if local is None:
        return draft_tree(ctx, params, None, Trie(*shared), bucket_counts, sc, out_tokens,
                          out_mask, out_prob, cal)
    return draft_tree(ctx, params, Trie(*local), Trie(*shared), bucket_counts, sc, out_tokens,
                      out_mask, out_prob, cal)


@jit(what="the ADAPTIVE draft-tree kernel")
def draft_adaptive_saved(ctx, params, local, shared, bucket_counts, sc, out_tokens, out_mask,
                         out_prob, cal, tok_row, par_row, prob_row):
    """:func:`draft_adaptive` (``params`` without a threshold), the tree also saved
    (:func:`save_creation`) for a size chosen over the batch."""
    used = draft_adaptive(ctx, params, local, shared, bucket_counts, sc, out_tokens, out_mask,
                          out_prob, cal)
    save_creation(sc, used, tok_row, par_row, prob_row)
    return used
