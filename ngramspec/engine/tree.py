"""Draft-tree kernels: BFS and PROB builders, libstdc++ orders, SGLang's output layout.

Tree node ``i`` (0 = root) keeps its children as a singly linked list in the iteration order of
a libstdc++ ``unordered_map`` (see :mod:`ngramspec.stdorder` for the readable model): ``head``,
``nxt``, the element count and the current bucket count.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .._jit import jit, jit_inline
from ..stdorder import HASHTABLE_BUCKET_COUNTS

__all__ = ["Scratch", "new_scratch", "scratch_sizes", "scratch_in", "build_bfs",
           "build_bfs_scheduled", "build_prob", "fill_result", "fill_layout", "BUCKET_COUNTS"]

#: libstdc++'s bucket counts as the tree kernels take them (passed in: one array, not a global).
BUCKET_COUNTS = np.asarray(HASHTABLE_BUCKET_COUNTS, dtype=np.int64)

#: Work arrays for drafting one request at a time (reused across a batch): the match kernel's
#: ``m_scratch``, the anchors ``a_nodes``/``a_depths``; the tree (``t_tok``, ``t_head``,
#: ``t_next``, ``t_cnt``, ``t_bc``: libstdc++ map per node), ``order`` (rehash and layout
#: queue), the BFS queue ``q_par``/``q_breadth``/``q_node``, ``slot_parent`` (layout), the PROB
#: heap ``h_p``/``h_par``/``h_node`` and its top-k list ``k_node``.  See :func:`new_scratch`.
Scratch = namedtuple("Scratch", "m_scratch a_nodes a_depths t_tok t_head t_next t_cnt t_bc "
                                "order q_par q_breadth q_node slot_parent h_p h_par h_node k_node")


@jit
def new_scratch(budget, max_depth, max_b):
    """A :data:`Scratch` for trees of ``budget`` drafts, ``max_depth`` anchors (the trie depth)
    and PROB's top-``max_b`` children."""
    n32, n64, nf = scratch_sizes(budget, max_depth, max_b)
    return scratch_in((np.empty(n32, np.int32), np.empty(n64, np.int64), np.empty(nf)),
                      budget, max_depth, max_b)


@jit
def scratch_sizes(budget, max_depth, max_b):
    """Lengths of the int32, int64 and float64 buffers :func:`scratch_in` slices."""
    n = budget + 1
    heap_cap = max_b * max_depth * (n + 1) + 1
    return 3 * max_depth + 6 * n + 2 * (n + 1) + 2 * heap_cap + max_b, n, n + 1 + heap_cap


@jit
def scratch_in(bufs, budget, max_depth, max_b):
    """A :data:`Scratch` of slices of ``bufs`` (int32, int64, float64 arrays at least
    :func:`scratch_sizes` long), which the caller keeps and reuses: measured, slicing costs a
    tenth of allocating the 17 arrays per call."""
    b32, b64, bf = bufs
    n = budget + 1
    heap_cap = max_b * max_depth * (n + 1) + 1
    d = max_depth
    m_scratch, a_nodes, a_depths = b32[:d], b32[d:2 * d], b32[2 * d:3 * d]
    at = 3 * d
    t_tok, t_head, t_next = b32[at:at + n], b32[at + n:at + 2 * n], b32[at + 2 * n:at + 3 * n]
    at += 3 * n
    t_cnt, order, slot_parent = (b32[at:at + n], b32[at + n:at + 2 * n],
                                 b32[at + 2 * n:at + 3 * n])
    at += 3 * n
    q_par, q_node = b32[at:at + n + 1], b32[at + n + 1:at + 2 * n + 2]
    at += 2 * n + 2
    h_par, h_node = b32[at:at + heap_cap], b32[at + heap_cap:at + 2 * heap_cap]
    at += 2 * heap_cap
    k_node = b32[at:at + max_b]
    t_bc = b64[:n]
    q_breadth, h_p = bf[:n + 1], bf[n + 1:n + 1 + heap_cap]
    return Scratch(m_scratch, a_nodes, a_depths, t_tok, t_head, t_next, t_cnt, t_bc, order,
                   q_par, q_breadth, q_node, slot_parent, h_p, h_par, h_node, k_node)


@jit_inline
def _bucket(token, bucket_count):
    # (size_t)(int64)token % bucket_count, in signed arithmetic: 2**64 = (2**32)**2.
    k = np.int64(token)
    if k >= 0:
        return k % bucket_count
    r = np.int64(4294967296) % bucket_count
    r = (r * r) % bucket_count
    return (r + k % bucket_count) % bucket_count


@jit_inline
def _place(par, idx, bucket_count, t_tok, t_head, t_next):
    b = _bucket(t_tok[idx], bucket_count)
    prev = -1
    cur = t_head[par]
    while cur != -1:
        if _bucket(t_tok[cur], bucket_count) == b:
            break
        prev = cur
        cur = t_next[cur]
    if cur == -1:  # empty bucket: the front of the whole list
        t_next[idx] = t_head[par]
        t_head[par] = idx
    else:  # in front of the first element of the bucket's run
        t_next[idx] = cur
        if prev == -1:
            t_head[par] = idx
        else:
            t_next[prev] = idx


@jit_inline
def _map_insert(par, idx, token, t_tok, t_head, t_next, t_cnt, t_bc, bucket_counts, order):
    t_tok[idx] = token
    t_next[idx] = -1
    t_head[idx] = -1
    t_cnt[idx] = 0
    t_bc[idx] = 1
    bc = t_bc[par]
    threshold = 0 if bc == 1 else bc
    if t_cnt[par] + 1 > threshold:
        new_bc = bc
        for c in bucket_counts:
            if c > bc:
                new_bc = c
                break
        n = 0
        cur = t_head[par]
        while cur != -1:
            order[n] = cur
            n += 1
            cur = t_next[cur]
        t_head[par] = -1
        for k in range(n):
            _place(par, order[k], new_bc, t_tok, t_head, t_next)
        t_bc[par] = new_bc
        bc = new_bc
    _place(par, idx, bc, t_tok, t_head, t_next)
    t_cnt[par] += 1


@jit_inline
def _map_get(par, token, t_tok, t_head, t_next):
    cur = t_head[par]
    while cur != -1:
        if t_tok[cur] == token:
            return cur
        cur = t_next[cur]
    return -1


@jit_inline
def _tree_reset(t_head, t_cnt, t_bc):
    t_head[0] = -1
    t_cnt[0] = 0
    t_bc[0] = 1


@jit
def build_bfs(n_anchors, budget, max_depth, min_b, max_b, t, sc, bucket_counts):
    """SGLang 0.5.23's recency BFS (anchor depths ``d``, ``top = steps = max(1, max_depth - 1)``);
    returns the drafted node count.  See :func:`build_bfs_scheduled`."""
    mmd = max(1, max_depth - 1)
    return build_bfs_scheduled(n_anchors, budget, mmd, mmd, min_b, max_b, t, sc, bucket_counts)


@jit_inline
def build_bfs_scheduled(n_anchors, budget, top, steps, min_b, max_b, t, sc, bucket_counts):
    """Recency BFS below the ``n_anchors`` anchors of ``sc`` (:data:`Scratch`) on trie ``t``
    into one tree; returns the drafted node count.

    Below an anchor of length ``d`` the breadth (a double) starts at
    ``(top - d) * scale + min_b`` with ``scale = (max_b - min_b) / steps`` and drops by
    ``scale`` per level.  SGLang 0.5.23: ``top = steps = max(1, max_trie_depth - 1)``;
    0.5.9: ``top = max_match_window_size``, ``steps = max_w - min_w + 1``.
    """
    tok, c_head, c_next = t.tok, t.c_head, t.c_next
    anchor_nodes, anchor_depths = sc.a_nodes, sc.a_depths
    t_tok, t_head, t_next, t_cnt, t_bc, order = (sc.t_tok, sc.t_head, sc.t_next, sc.t_cnt,
                                                 sc.t_bc, sc.order)
    q_par, q_breadth, q_node = sc.q_par, sc.q_breadth, sc.q_node
    _tree_reset(t_head, t_cnt, t_bc)
    scale = float(max_b - min_b) / steps
    cursor = 1
    qcap = q_par.size
    for a in range(n_anchors):
        head = 0
        tail = 1
        q_par[0] = 0
        q_breadth[0] = float(top - anchor_depths[a]) * scale + float(min_b)
        q_node[0] = anchor_nodes[a]
        while head < tail and cursor <= budget:
            par = q_par[head]
            cb = q_breadth[head]
            node = q_node[head]
            head += 1
            breadth = max(1, int(cb))
            i = 0
            ch = c_head[node]
            while ch != -1:
                if i >= breadth or cursor > budget:
                    break
                pos = _map_get(par, tok[ch], t_tok, t_head, t_next)
                if pos == -1:
                    pos = cursor
                    _map_insert(par, pos, tok[ch], t_tok, t_head, t_next, t_cnt, t_bc,
                                bucket_counts, order)
                    cursor += 1
                if tail < qcap:
                    q_par[tail] = pos
                    q_breadth[tail] = cb - scale
                    q_node[tail] = ch
                    tail += 1
                i += 1
                ch = c_next[ch]
    return cursor - 1


@jit_inline
def _heap_sift_up(h_p, h_par, h_node, hole, p, par, node):
    while hole > 0 and h_p[(hole - 1) // 2] < p:
        up = (hole - 1) // 2
        h_p[hole] = h_p[up]
        h_par[hole] = h_par[up]
        h_node[hole] = h_node[up]
        hole = up
    h_p[hole] = p
    h_par[hole] = par
    h_node[hole] = node


@jit_inline
def _heap_pop(h_p, h_par, h_node, size):
    """libstdc++ pop_heap on [0, size); the popped top ends at index size - 1."""
    last = size - 1
    vp, vpar, vnode = h_p[last], h_par[last], h_node[last]
    h_p[last], h_par[last], h_node[last] = h_p[0], h_par[0], h_node[0]
    length = last
    hole = 0
    child = 0
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if h_p[child] < h_p[child - 1]:
            child -= 1
        h_p[hole], h_par[hole], h_node[hole] = h_p[child], h_par[child], h_node[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        h_p[hole], h_par[hole], h_node[hole] = h_p[child - 1], h_par[child - 1], h_node[child - 1]
        hole = child - 1
    _heap_sift_up(h_p, h_par, h_node, hole, vp, vpar, vnode)


@jit_inline
def _prob_add(par, node, prob, top_k, tok, freq, c_head, c_next, k_node, h_p, h_par, h_node,
              size):
    # The top_k children by (frequency descending, token ascending): one pass, insertion into
    # a sorted list of at most top_k (sibling tokens are distinct, so the order is strict).
    take = 0
    ch = c_head[node]
    while ch != -1:
        f = freq[ch]
        t = tok[ch]
        j = take
        while j > 0 and (freq[k_node[j - 1]] < f or (freq[k_node[j - 1]] == f
                                                     and tok[k_node[j - 1]] > t)):
            j -= 1
        if j < top_k:
            for m in range(min(take, top_k - 1), j, -1):
                k_node[m] = k_node[m - 1]
            k_node[j] = ch
            if take < top_k:
                take += 1
        ch = c_next[ch]
    total = 0.0
    for j in range(take):
        total += float(freq[k_node[j]])
    if total == 0.0:
        total = 1.0
    for j in range(take):
        if size < h_p.size:
            p = float(freq[k_node[j]]) / total * prob
            _heap_sift_up(h_p, h_par, h_node, size, p, par, k_node[j])
            size += 1
    return size


@jit_inline
def build_prob(n_anchors, budget, top_k, t, sc, bucket_counts):
    """Best-first expansion by path probability below the anchors of ``sc``; returns the
    drafted node count."""
    tok, freq, c_head, c_next = t.tok, t.freq, t.c_head, t.c_next
    anchor_nodes = sc.a_nodes
    t_tok, t_head, t_next, t_cnt, t_bc, order = (sc.t_tok, sc.t_head, sc.t_next, sc.t_cnt,
                                                 sc.t_bc, sc.order)
    k_node, h_p, h_par, h_node = sc.k_node, sc.h_p, sc.h_par, sc.h_node
    _tree_reset(t_head, t_cnt, t_bc)
    size = 0
    cursor = 1
    for a in range(n_anchors):
        # A full tree takes nothing more: the heap (and the remaining anchors, whose child
        # lists near the root are the longest) would only be walked for nothing.
        if cursor > budget:
            break
        size = _prob_add(0, anchor_nodes[a], 1.0, top_k, tok, freq, c_head, c_next, k_node,
                         h_p, h_par, h_node, size)
        while size > 0 and cursor <= budget:
            _heap_pop(h_p, h_par, h_node, size)
            size -= 1
            p, par, node = h_p[size], h_par[size], h_node[size]
            pos = _map_get(par, tok[node], t_tok, t_head, t_next)
            if pos == -1:
                pos = cursor
                cursor += 1
                _map_insert(par, pos, tok[node], t_tok, t_head, t_next, t_cnt, t_bc,
                            bucket_counts, order)
                if cursor > budget:
                    break
            size = _prob_add(pos, node, p, top_k, tok, freq, c_head, c_next, k_node, h_p,
                             h_par, h_node, size)
    return cursor - 1


@jit_inline
def fill_result(last_token, n, sc, out_tokens, out_mask):
    """Level-order layout and ancestor mask of the tree in ``sc`` (any scratch bundle with
    ``t_tok``, ``t_head``, ``t_next``, ``order``, ``slot_parent``) into one request's row."""
    fill_layout(last_token, n, sc.t_tok, sc.t_head, sc.t_next, sc.order, sc.slot_parent,
                out_tokens, out_mask)


@jit_inline
def fill_layout(last_token, n, t_tok, t_head, t_next, q_idx, slot_parent, out_tokens, out_mask):
    """SGLang's ``fillResult`` on the tree's arrays: level order, siblings in map order,
    token-0 padding, ancestor mask (``q_idx``, ``slot_parent``: scratch of ``n`` slots)."""
    out_tokens[0] = last_token
    slot_parent[0] = -1
    count = 1
    # The queue holds tree indices; their slots are assigned as they are dequeued.
    head = 0
    tail = 0
    cur = t_head[0]
    while cur != -1:
        q_idx[tail] = cur
        slot_parent[tail + 1] = 0
        tail += 1
        cur = t_next[cur]
    while head < tail:
        idx = q_idx[head]
        head += 1
        slot = count
        out_tokens[slot] = t_tok[idx]
        count += 1
        ch = t_head[idx]
        while ch != -1:
            q_idx[tail] = ch
            slot_parent[tail + 1] = slot
            tail += 1
            ch = t_next[ch]
    for i in range(count, n):
        out_tokens[i] = 0
        slot_parent[i] = 0
    out_mask[:, :] = False
    for i in range(n):
        p = slot_parent[i]
        if p != -1:
            for j in range(p + 1):
                out_mask[i, j] = out_mask[p, j]
        out_mask[i, i] = True
