"""Suffix automata on flat arrays: the hash table and online build, and the matching walk.

Part of the engine's external corpora (:mod:`ngramspec.engine.corpora.sam` holds the public pieces and
says how the records are laid out); the readable model is :mod:`ngramspec.reference.sam`.

While building, transitions live in edge lists plus an open-addressing hash table keyed by
``(state, token)``, both dropped once the records are made.  The walk (§3.6.4) reads the
records of one automaton inside a pool (:func:`~ngramspec.engine.corpora.sam.automata_pool`).
"""

from __future__ import annotations

import numpy as np

from ..._jit import jit, jit_inline

__all__ = ["SEPARATOR"]

SEPARATOR = -(2**31)
_SMALL = 16  # child ranges up to this size are sorted in place


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


@jit(what="the corpus automaton builder")
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
