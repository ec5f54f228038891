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

While building, transitions live in edge lists plus an open-addressing hash table keyed by
``(state, token)``, both dropped once the records are made.  The match kernels take every
loaded corpus in one pool (:func:`automata_pool`: the records concatenated, and where each
automaton starts), so that their argument types do not depend on the number of corpora.  The
draft trees keep their children in libstdc++ ``unordered_map`` order
(:mod:`ngramspec.engine.tree`'s model and layout), each tree one 2-D int32 array (rows: see
``_TREE_ROWS``).

Matching: :func:`corpus_row` is one request's corpus part (every corpus's tree merged in turn
into the trie's), called per request by the backend's fused kernel
(``engine.backend.match_batch_corpora``) and by the compiled replay
(:func:`draft_with_corpora`); it continues each row's last walk through the automata when the
window allows it (see its docstring).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .._jit import jit, jit_inline
from .tree import BUCKET_COUNTS, build_bfs_scheduled, build_prob, fill_layout, fill_result
from .tree import _bucket as bucket

__all__ = ["FlatAutomaton", "merge_batch", "automata_pool", "corpus_row",
           "corpus_scratch", "corpus_scratch_in", "corpus_walks", "grow_walks",
           "draft_with_corpora", "replay_corpora", "SEPARATOR"]

SEPARATOR = -(2**31)
_SMALL = 16  # child ranges up to this size are sorted in place
# A draft tree is one int32 array of these rows per node (one array, not six: a bundle of
# arrays costs reference counting at every helper call): token, first child, next sibling,
# child count, bucket count, bucket under the parent (libstdc++ unordered_map order).
_TREE_ROWS = 6


# Building -------------------------------------------------------------------------------------

@jit
def _slot(key, mask):
    # key = state * 2**32 + (token & 0xffffffff) < 2**63; products stay below 2**63.
    x = (key >> 32) * 0x9E3779B1 ^ (key & 0xFFFFFFFF) * 0x27D4EB2F
    x ^= x >> 29
    return x & mask


@jit
def _ht_find(ht_key, ht_val, key):
    mask = ht_key.size - 1
    i = _slot(key, mask)
    while True:
        k = ht_key[i]
        if k == key:
            return ht_val[i]
        if k == -1:
            return -1
        i = (i + 1) & mask


@jit
def _ht_put(ht_key, ht_val, key, val):
    mask = ht_key.size - 1
    i = _slot(key, mask)
    while ht_key[i] != -1:
        i = (i + 1) & mask
    ht_key[i] = key
    ht_val[i] = val


@jit
def _ht_grow(ht_key, ht_val):
    new_key = np.full(ht_key.size * 2, -1, np.int64)
    new_val = np.empty(ht_key.size * 2, np.int32)
    for i in range(ht_key.size):
        if ht_key[i] != -1:
            _ht_put(new_key, new_val, ht_key[i], ht_val[i])
    return new_key, new_val


@jit
def _key(state, token):
    return np.int64(state) * 4294967296 + (np.int64(token) & 0xFFFFFFFF)


@jit_inline
def _root_slot(t, mask):
    x = (np.int64(t) & 0xFFFFFFFF) * 0x5BD1E995  # below 2**63
    return (x ^ (x >> 29)) & mask


@jit
def _build_kernel(stream, prob):
    """The automaton of ``stream`` (§3.6.3): online construction, then counts and last ends up
    the suffix links, then the edge arrays.  ``prob`` chooses the children's order."""
    n_tok = stream.size
    cap_s = 2 * n_tok + 2
    cap_e = 3 * n_tok + 4
    length = np.zeros(cap_s, np.int32)
    link = np.full(cap_s, -1, np.int32)
    occ = np.zeros(cap_s, np.int64)
    last_end = np.full(cap_s, -1, np.int64)
    e_head = np.full(cap_s, -1, np.int32)
    e_tok = np.empty(cap_e, np.int32)
    e_dst = np.empty(cap_e, np.int32)
    e_next = np.empty(cap_e, np.int32)
    size = 16
    while size < 2 * n_tok:
        size *= 2
    ht_key = np.full(size, -1, np.int64)
    ht_val = np.empty(size, np.int32)
    n_states = 1
    n_edges = 0
    last = 0
    for i in range(n_tok):
        t = stream[i]
        cur = n_states
        n_states += 1
        length[cur] = length[last] + 1
        occ[cur] = 1
        last_end[cur] = i
        p = last
        while p != -1 and _ht_find(ht_key, ht_val, _key(p, t)) == -1:
            if 2 * (n_edges + 1) > ht_key.size:
                ht_key, ht_val = _ht_grow(ht_key, ht_val)
            e_tok[n_edges] = t
            e_dst[n_edges] = cur
            e_next[n_edges] = e_head[p]
            e_head[p] = n_edges
            _ht_put(ht_key, ht_val, _key(p, t), n_edges)
            n_edges += 1
            p = link[p]
        if p == -1:
            link[cur] = 0
        else:
            q = e_dst[_ht_find(ht_key, ht_val, _key(p, t))]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = n_states
                n_states += 1
                length[clone] = length[p] + 1
                link[clone] = link[q]
                last_end[clone] = last_end[q]
                e = e_head[q]
                while e != -1:
                    if 2 * (n_edges + 1) > ht_key.size:
                        ht_key, ht_val = _ht_grow(ht_key, ht_val)
                    e_tok[n_edges] = e_tok[e]
                    e_dst[n_edges] = e_dst[e]
                    e_next[n_edges] = e_head[clone]
                    e_head[clone] = n_edges
                    _ht_put(ht_key, ht_val, _key(clone, e_tok[e]), n_edges)
                    n_edges += 1
                    e = e_next[e]
                while p != -1:
                    e = _ht_find(ht_key, ht_val, _key(p, t))
                    if e == -1 or e_dst[e] != q:
                        break
                    e_dst[e] = clone
                    p = link[p]
                link[q] = clone
                link[cur] = clone
        last = cur
    # Counts and last ends flow up the suffix links, longest states first (counting sort).
    by_len = np.zeros(n_tok + 2, np.int64)
    for s in range(n_states):
        by_len[length[s]] += 1
    for k in range(1, n_tok + 2):
        by_len[k] += by_len[k - 1]
    order = np.empty(n_states, np.int32)
    for s in range(n_states - 1, -1, -1):
        by_len[length[s]] -= 1
        order[by_len[length[s]]] = s
    for k in range(n_states - 1, 0, -1):
        s = order[k]
        up = link[s]
        occ[up] += occ[s]
        if last_end[s] > last_end[up]:
            last_end[up] = last_end[s]
    # The records (module docstring), written in place: no array of the automaton's size is
    # allocated after them but small sort buffers, so that the building arrays, freed below
    # them, go back to the system.  Each state's range sorted by token, then the children in
    # draft order.
    states = np.empty((n_states, 4), np.int32)
    at = 0
    for s in range(n_states):
        k = 0
        e = e_head[s]
        while e != -1:
            k += 1
            e = e_next[e]
        states[s, 0] = at
        states[s, 1] = 2 * k
        states[s, 2] = length[s]
        states[s, 3] = link[s]
        at += k
    edges = np.empty((n_edges, 2), np.int32)
    kids = np.zeros((n_edges, 3 if prob else 2), np.int32)
    max_kids = 0
    for s in range(n_states):
        lo = states[s, 0]
        hi = lo + (states[s, 1] >> 1)
        j = lo
        e = e_head[s]
        while e != -1:
            edges[j, 0] = e_tok[e]
            edges[j, 1] = e_dst[e]
            j += 1
            e = e_next[e]
        if hi - lo > _SMALL:
            idx = np.argsort(edges[lo:hi, 0], kind="mergesort")
            st = np.empty((hi - lo, 2), np.int32)
            for m in range(hi - lo):
                st[m, 0] = edges[lo + idx[m], 0]
                st[m, 1] = edges[lo + idx[m], 1]
            edges[lo:hi] = st
        else:  # most states have a few children: insertion sort, no allocation
            for a in range(lo + 1, hi):
                t, d = edges[a, 0], edges[a, 1]
                j = a - 1
                while j >= lo and edges[j, 0] > t:
                    edges[j + 1, 0] = edges[j, 0]
                    edges[j + 1, 1] = edges[j, 1]
                    j -= 1
                edges[j + 1, 0] = t
                edges[j + 1, 1] = d
        first = lo
        if hi > lo and edges[lo, 0] == SEPARATOR:
            first = lo + 1
            states[s, 1] += 1
        nk = hi - first
        if nk > max_kids:
            max_kids = nk
        if nk == 0:
            continue
        if nk > _SMALL:
            keys = np.empty(nk, np.int64)
            for m in range(nk):
                d = edges[first + m, 1]
                keys[m] = -occ[d] if prob else -last_end[d]
            # Stable: equal counts keep the ascending token order of the range.
            idx = np.argsort(keys, kind="mergesort")
            for m in range(nk):
                kids[lo + m, 0] = edges[first + idx[m], 0]
                kids[lo + m, 1] = edges[first + idx[m], 1]
        else:  # stable insertion sort by the key, from the token order
            for m in range(nk):
                t, d = edges[first + m, 0], edges[first + m, 1]
                key = occ[d] if prob else last_end[d]
                j = lo + m - 1
                while j >= lo and (occ[kids[j, 1]] if prob else last_end[kids[j, 1]]) < key:
                    kids[j + 1, 0] = kids[j, 0]
                    kids[j + 1, 1] = kids[j, 1]
                    j -= 1
                kids[j + 1, 0] = t
                kids[j + 1, 1] = d
        if prob:
            for m in range(lo, lo + nk):
                kids[m, 2] = occ[kids[m, 1]]
    # The root's transitions again in a hash table (half full at most): a walk falls back to
    # the root for most tokens it cannot extend, and the root has a transition per distinct
    # token of the corpus, too many for a quick binary search.
    r = states[0, 1] >> 1
    size = 2
    while size < 2 * r:
        size *= 2
    root = np.zeros((size, 2), np.int32)
    root[:, 1] = -1
    for j in range(r):
        i = _root_slot(edges[j, 0], size - 1)
        while root[i, 1] != -1:
            i = (i + 1) & (size - 1)
        root[i, 0] = edges[j, 0]
        root[i, 1] = edges[j, 1]
    return states, edges, kids, root, max_kids


# Matching and drafting ------------------------------------------------------------------------
# Helpers take the records of one automaton inside a pool (``st``, ``ed``, ``kd``) and its
# bases there (``sb`` states, ``eb`` edges; 0 and 0 for an automaton alone): state and edge
# numbers in the records are the automaton's own.

@jit_inline
def _lookup(s, t, st, ed, rt, sb, eb, rb, rmask):
    if s == 0:  # the root's hash table
        i = _root_slot(t, rmask)
        while True:
            d = rt[rb + i, 1]
            if d == -1:
                return -1
            if rt[rb + i, 0] == t:
                return d
            i = (i + 1) & rmask
    r = sb + s
    lo = eb + st[r, 0]
    end = lo + (st[r, 1] >> 1)
    hi = end
    while lo < hi:
        mid = (lo + hi) >> 1
        if ed[mid, 0] < t:
            lo = mid + 1
        else:
            hi = mid
    if lo < end and ed[lo, 0] == t:
        return ed[lo, 1]
    return -1


@jit_inline
def _n_kids(f):
    """Children of a state (separator left out) from its record's field 1."""
    return (f >> 1) - (f & 1)


@jit_inline
def _extend(ctx, start, s, m, st, ed, rt, sb, eb, rb, rmask):
    """The matching walk of §3.6.4 from ``(s, m)`` over ``ctx[start:]``: afterwards the
    longest suffix found in the corpus has length ``m`` and lies in state ``s``
    (``length[link[s]] < m <= length[s]``, or ``s = m = 0``)."""
    for i in range(start, ctx.size):
        t = ctx[i]
        nxt = _lookup(s, t, st, ed, rt, sb, eb, rb, rmask)
        while s != 0 and nxt == -1:
            s = st[sb + s, 3]
            m = min(m, st[sb + s, 2])
            nxt = _lookup(s, t, st, ed, rt, sb, eb, rb, rmask)
        if nxt != -1:
            s = nxt
            m += 1
        else:
            s = 0
            m = 0
    return s, m


@jit_inline
def _chain(s, m, st, sb, a_state, a_len):
    """The anchors of a walk's end ``(s, m)``: that state, then its suffix links; states with
    children only.  Returns the anchor count."""
    count = 0
    while s > 0 and m > 0:
        r = sb + s
        if _n_kids(st[r, 1]) > 0:
            a_state[count] = s
            a_len[count] = m
            count += 1
        s = st[r, 3]
        if s <= 0:
            break
        m = min(m, st[sb + s, 2])
    return count


@jit
def _anchors(ctx, max_depth, st, ed, rt, a_state, a_len):
    """§3.6.4: the longest suffix of the last ``max_depth`` tokens found in the corpus, then
    its suffix links; states with children only.  Returns the anchor count."""
    s, m = _extend(ctx, max(0, ctx.size - max_depth), 0, 0, st, ed, rt, 0, 0, 0,
                   rt.shape[0] - 1)
    return _chain(s, m, st, 0, a_state, a_len)


@jit_inline
def _place(tree, par, idx, b):
    """Put ``idx`` (bucket ``b``) in ``par``'s child list as libstdc++ does: in front of the
    first child of the same bucket, else at the front of the list."""
    tree[5, idx] = b
    prev = -1
    cur = tree[1, par]
    while cur != -1 and tree[5, cur] != b:
        prev = cur
        cur = tree[2, cur]
    if cur == -1:
        tree[2, idx] = tree[1, par]
        tree[1, par] = idx
    else:
        tree[2, idx] = cur
        if prev == -1:
            tree[1, par] = idx
        else:
            tree[2, prev] = idx


@jit_inline
def _map_insert(par, idx, token, tree, order):
    """Child ``idx`` with ``token`` under ``par``, in libstdc++ unordered_map order (the
    engine's tree model, :mod:`ngramspec.engine.tree`).  Each node keeps its bucket under its
    parent's bucket count, so a placement takes one modulo, not one per sibling."""
    tree[0, idx] = token
    tree[2, idx] = -1
    tree[1, idx] = -1
    tree[3, idx] = 0
    tree[4, idx] = 1
    bc = tree[4, par]
    threshold = 0 if bc == 1 else bc
    if tree[3, par] + 1 > threshold:
        new_bc = bc
        for i in range(BUCKET_COUNTS.size):
            if BUCKET_COUNTS[i] > bc:
                new_bc = BUCKET_COUNTS[i]
                break
        n = 0
        cur = tree[1, par]
        while cur != -1:
            order[n] = cur
            n += 1
            cur = tree[2, cur]
        tree[1, par] = -1
        for k in range(n):
            c = order[k]
            _place(tree, par, c, bucket(tree[0, c], new_bc))
        tree[4, par] = new_bc
        bc = new_bc
    _place(tree, par, idx, bucket(token, bc))
    tree[3, par] += 1


@jit_inline
def _map_get(par, token, tree):
    cur = tree[1, par]
    while cur != -1:
        if tree[0, cur] == token:
            return cur
        cur = tree[2, cur]
    return -1


@jit
def _new_tree(n):
    return np.empty((_TREE_ROWS, n), np.int32)


@jit_inline
def _tree_reset(tree):
    tree[1, 0] = -1
    tree[3, 0] = 0
    tree[4, 0] = 1


@jit
def _fill(last_token, n, tree, q_idx, slot_parent, out_tokens, out_mask):
    """SGLang's ``fillResult``: level order, siblings in map order, padding, ancestor mask."""
    fill_layout(last_token, n, tree[0], tree[1], tree[2], q_idx, slot_parent, out_tokens,
                out_mask)


@jit
def _bfs(a_state, a_len, count, budget, max_depth, min_b, max_b, st, kd, sb, eb, tree, order,
         q_par, q_breadth, q_state):
    """§3.6.5: recency BFS below each anchor; the breadth starts from the matched length."""
    _tree_reset(tree)
    mmd = max(1, max_depth - 1)
    scale = float(max_b - min_b) / mmd
    cursor = 1
    qcap = q_par.size
    for a in range(count):
        head = 0
        tail = 1
        q_par[0] = 0
        q_breadth[0] = float(mmd - a_len[a]) * scale + float(min_b)
        q_state[0] = a_state[a]
        while head < tail and cursor <= budget:
            par = q_par[head]
            cb = q_breadth[head]
            s = q_state[head]
            head += 1
            breadth = max(1, int(cb))
            r = sb + s
            lo = eb + st[r, 0]
            nk = _n_kids(st[r, 1])
            for i in range(nk):
                if i >= breadth or cursor > budget:
                    break
                t = kd[lo + i, 0]
                pos = _map_get(par, t, tree)
                if pos == -1:
                    pos = cursor
                    _map_insert(par, pos, t, tree, order)
                    cursor += 1
                if tail < qcap:
                    q_par[tail] = pos
                    q_breadth[tail] = cb - scale
                    q_state[tail] = kd[lo + i, 1]
                    tail += 1
    return cursor - 1


@jit
def _sift_up(h_p, h_par, h_tok, h_state, hole, p, par, tok, state):
    while hole > 0 and h_p[(hole - 1) // 2] < p:
        up = (hole - 1) // 2
        h_p[hole] = h_p[up]
        h_par[hole] = h_par[up]
        h_tok[hole] = h_tok[up]
        h_state[hole] = h_state[up]
        hole = up
    h_p[hole] = p
    h_par[hole] = par
    h_tok[hole] = tok
    h_state[hole] = state


@jit
def _pop(h_p, h_par, h_tok, h_state, size):
    """libstdc++ pop_heap on [0, size) (spec A.2); the top ends at index size - 1."""
    last = size - 1
    vp, vpar, vtok, vst = h_p[last], h_par[last], h_tok[last], h_state[last]
    h_p[last], h_par[last], h_tok[last], h_state[last] = h_p[0], h_par[0], h_tok[0], h_state[0]
    length = last
    hole = 0
    child = 0
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if h_p[child] < h_p[child - 1]:
            child -= 1
        h_p[hole], h_par[hole] = h_p[child], h_par[child]
        h_tok[hole], h_state[hole] = h_tok[child], h_state[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        h_p[hole], h_par[hole] = h_p[child - 1], h_par[child - 1]
        h_tok[hole], h_state[hole] = h_tok[child - 1], h_state[child - 1]
        hole = child - 1
    _sift_up(h_p, h_par, h_tok, h_state, hole, vp, vpar, vtok, vst)


@jit_inline
def _prob_add(par, s, prob, top_k, st, kd, sb, eb, h_p, h_par, h_tok, h_state, size):
    r = sb + s
    lo = eb + st[r, 0]
    take = min(top_k, _n_kids(st[r, 1]))
    if take == 0:
        return size
    total = 0.0
    for j in range(take):
        total += float(kd[lo + j, 2])
    for j in range(take):
        if size < h_p.size:
            _sift_up(h_p, h_par, h_tok, h_state, size, float(kd[lo + j, 2]) / total * prob, par,
                     kd[lo + j, 0], kd[lo + j, 1])
            size += 1
    return size


@jit
def _prob(a_state, count, budget, top_k, st, kd, sb, eb, tree, order, h_p, h_par, h_tok,
          h_state):
    """§3.6.6: best-first by path probability (exact continuation counts), libstdc++ ties."""
    _tree_reset(tree)
    size = 0
    cursor = 1
    for a in range(count):
        size = _prob_add(0, a_state[a], 1.0, top_k, st, kd, sb, eb, h_p, h_par, h_tok, h_state,
                         size)
        while size > 0 and cursor <= budget:
            _pop(h_p, h_par, h_tok, h_state, size)
            size -= 1
            p, par, t, s = h_p[size], h_par[size], h_tok[size], h_state[size]
            pos = _map_get(par, t, tree)
            if pos == -1:
                pos = cursor
                cursor += 1
                _map_insert(par, pos, t, tree, order)
            size = _prob_add(pos, s, p, top_k, st, kd, sb, eb, h_p, h_par, h_tok, h_state,
                             size)
    return cursor - 1


@jit
def _draft_kernel(flat, offsets, budget, max_depth, min_b, max_b, prob, st, ed, kd, rt,
                  max_kids, out_tokens, out_mask):
    """Each context's corpus tree of ``budget`` nodes, laid out into ``budget + 1`` slots."""
    n = budget + 1
    tree = _new_tree(n)
    order = np.empty(n + 1, np.int32)
    slot_parent = np.empty(n, np.int32)
    a_state = np.empty(max_depth + 1, np.int32)
    a_len = np.empty(max_depth + 1, np.int32)
    q_par = np.empty(n + 1, np.int32)
    q_breadth = np.empty(n + 1, np.float64)
    q_state = np.empty(n + 1, np.int32)
    top_k = min(max_b, max(1, max_kids))
    heap_cap = top_k * (max_depth + 1) * (2 * n + 2) + 1
    h_p = np.empty(heap_cap if prob else 1, np.float64)
    h_par = np.empty(h_p.size, np.int32)
    h_tok = np.empty(h_p.size, np.int32)
    h_state = np.empty(h_p.size, np.int32)
    for b in range(offsets.size - 1):
        ctx = flat[offsets[b]:offsets[b + 1]]
        count = _anchors(ctx, max_depth, st, ed, rt, a_state, a_len)
        if prob:
            _prob(a_state, count, budget, max_b, st, kd, 0, 0, tree, order, h_p, h_par, h_tok,
                  h_state)
        else:
            _bfs(a_state, a_len, count, budget, max_depth, min_b, max_b, st, kd, 0, 0, tree,
                 order, q_par, q_breadth, q_state)
        _fill(ctx[ctx.size - 1], n, tree, order, slot_parent, out_tokens[b], out_mask[b])


# The merge --------------------------------------------------------------------------------------

@jit
def _insert_leaf_paths(tokens, mask, tree, order, parent, is_parent, path, cursor, n):
    """Insert the leaf paths of one laid-out tree (§3.6.8); returns the new cursor."""
    m = tokens.size
    if m <= 1:
        return cursor
    for i in range(m):
        is_parent[i] = False
    parent[0] = -1
    for i in range(1, m):
        j = i - 1
        while not mask[i, j]:
            j -= 1
        parent[i] = j
        is_parent[j] = True
    for i in range(1, m):
        if is_parent[i] or cursor >= n:
            continue
        k = 0
        j = i
        while j > 0:
            path[k] = tokens[j]
            k += 1
            j = parent[j]
        if k == 1 and path[0] == 0:
            continue  # padding, or a real depth-1 token-0 leaf: dropped as SGLang does
        par = 0
        for r in range(k - 1, -1, -1):
            t = path[r]
            pos = _map_get(par, t, tree)
            if pos != -1:
                par = pos
                continue
            if cursor >= n:
                break
            _map_insert(par, cursor, t, tree, order)
            par = cursor
            cursor += 1
    return cursor


@jit
def _merge_kernel(last_tokens, n, p_tokens, p_mask, s_tokens, s_mask, out_tokens, out_mask,
                  out_num):
    """SGLang's ``combineRootResults_`` per request: primary's leaf paths, then secondary's,
    into one fresh tree of ``n`` slots, laid out again."""
    tree = _new_tree(n)
    order = np.empty(n + 1, np.int32)
    slot_parent = np.empty(n, np.int32)
    m = max(p_tokens.shape[1], s_tokens.shape[1])
    parent = np.empty(m, np.int32)
    is_parent = np.empty(m, np.bool_)
    path = np.empty(m, np.int32)
    for b in range(last_tokens.size):
        _tree_reset(tree)
        cursor = _insert_leaf_paths(p_tokens[b], p_mask[b], tree, order, parent, is_parent, path,
                                    1, n)
        cursor = _insert_leaf_paths(s_tokens[b], s_mask[b], tree, order, parent, is_parent, path,
                                    cursor, n)
        _fill(last_tokens[b], n, tree, order, slot_parent, out_tokens[b], out_mask[b])
        out_num[b] = cursor - 1


@jit_inline
def _layout(n, tree, q_idx, out_tok, out_par):
    """The slot order of :func:`_fill` (SGLang's ``fillResult``) without the mask: each slot's
    token and parent slot, padding (token 0 under the root) up to ``n`` slots.  Trees merged
    again need no more: a slot's parent is the largest ancestor the mask would show."""
    out_par[0] = -1
    count = 1
    head = 0
    tail = 0
    cur = tree[1, 0]
    while cur != -1:
        q_idx[tail] = cur
        out_par[tail + 1] = 0
        tail += 1
        cur = tree[2, cur]
    while head < tail:
        idx = q_idx[head]
        head += 1
        out_tok[count] = tree[0, idx]
        ch = tree[1, idx]
        while ch != -1:
            q_idx[tail] = ch
            out_par[tail + 1] = count
            tail += 1
            ch = tree[2, ch]
        count += 1
    for i in range(count, n):
        out_tok[i] = 0
        out_par[i] = 0


@jit_inline
def _insert_paths(tok, par, m, tree, order, is_parent, new_idx, chain, cursor, n, lookup):
    """Insert the leaf paths of a tree laid out as tokens and parent slots (``m`` slots,
    parents before children) in slot order, as :func:`_insert_leaf_paths` does, walking each
    slot once: ``new_idx`` maps a slot to its node once inserted or found, so a leaf only adds
    its ancestors that are not there yet.  ``lookup=False``: the tree is empty (siblings have
    distinct tokens, so nothing is found).  Returns the new cursor."""
    if m <= 1:
        return cursor
    for i in range(m):
        is_parent[i] = False
        new_idx[i] = -1
    new_idx[0] = 0
    for i in range(1, m):
        is_parent[par[i]] = True
    for i in range(1, m):
        if is_parent[i] or cursor >= n:
            continue
        if par[i] == 0 and tok[i] == 0:
            continue  # padding, or a real depth-1 token-0 leaf: dropped as SGLang does
        k = 0
        j = i
        while new_idx[j] == -1:
            chain[k] = j
            k += 1
            j = par[j]
        at = new_idx[j]
        for r in range(k - 1, -1, -1):
            slot = chain[r]
            t = tok[slot]
            if lookup:
                pos = _map_get(at, t, tree)
                if pos != -1:
                    new_idx[slot] = pos
                    at = pos
                    continue
            if cursor >= n:
                break  # a path cut here stays cut: its slots keep new_idx -1
            _map_insert(at, cursor, t, tree, order)
            new_idx[slot] = cursor
            at = cursor
            cursor += 1
    return cursor


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
    h_par, h_tok, h_state = (b32[at:at + heap], b32[at + heap:at + 2 * heap],
                             b32[at + 2 * heap:at + 3 * heap])
    q_breadth, h_p = bf[:m + 1], bf[m + 1:m + 1 + heap]
    p_mask = bb[:t1 * t1].reshape((t1, t1))
    is_parent = bb[t1 * t1:t1 * t1 + big]
    return (p_tok, p_mask, c_tree, c_order, c_tok, c_par, tree, order, r_tok, r_par, is_parent,
            new_idx, chain, a_state, a_len, q_par, q_breadth, q_state, h_p, h_par, h_tok,
            h_state)


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
     a_state, a_len, q_par, q_breadth, q_state, h_p, h_par, h_tok, h_state) = cs
    # Sources: node i's in out_source[n + i], the laid-out slots' between merges in
    # out_source[2 * n:]; a merge creates its nodes in cursor order, the primary's first.
    keep_src = out_source.size > 0
    merged = False  # the primary is the trie's tree (source 0), later the last merge
    st, ed, kd, rt, bases = pool
    last = ctx[ctx.size - 1]
    m = per + 1
    rm = p_tokens.size
    r_par[0] = -1
    for i in range(1, rm):
        j = i - 1
        while not p_mask[i, j]:
            j -= 1
        r_par[i] = j
        r_tok[i] = p_tokens[i]
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
            _prob(a_state, count, per, max_b, st, kd, sb, eb, c_tree, c_order, h_p, h_par,
                  h_tok, h_state)
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
    """The corpora as the compiled replay takes them (``automata`` in merge order; ``per``
    0: none, and the replay drafts from the trie alone).  The last item counts accepted
    draft tokens per request (``requests`` rows) by source: column 0 the trie's tree,
    ``k + 1`` corpus ``k`` (:func:`corpus_row`'s ``out_source``)."""
    sources = len(automata) + 1
    if not automata:  # the kernel's argument types stay the same: one tiny automaton, unused
        automata = [FlatAutomaton.build(np.zeros(1, np.int32), prob=prob)]
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


def merge_batch(last_tokens: np.ndarray, n: int, primary: tuple[np.ndarray, np.ndarray],
                secondary: tuple[np.ndarray, np.ndarray],
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The merge (§3.6.8) of each request's primary and secondary trees into ``n`` slots:
    tokens ``(B, n)``, masks and node counts."""
    count = last_tokens.size
    tokens = np.empty((count, n), np.int32)
    mask = np.empty((count, n, n), np.bool_)
    num = np.empty(count, np.int32)
    _merge_kernel(last_tokens, n, primary[0], primary[1], secondary[0], secondary[1], tokens,
                  mask, num)
    return tokens, mask, num


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
