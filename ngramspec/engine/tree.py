"""Draft-tree kernels: BFS and PROB builders, libstdc++ orders, SGLang's output layout.

Tree node ``i`` (0 = root) keeps its children as a singly linked list in the iteration order of
a libstdc++ ``unordered_map`` (see :mod:`ngramspec.stdorder` for the readable model).  This is
the engine's one compiled model of that order (:func:`_map_insert`, :func:`_map_get`), used by
the trie's trees here, ADAPTIVE's and the corpora's: a tree is one ``(TREE_ROWS, n)`` int32
array (one array, not six: a bundle of arrays costs reference counting at every helper call)
whose rows hold per node its token, first child, next sibling, child count, bucket count and
bucket under its parent (kept so that a placement takes one modulo, not one per sibling).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .._jit import jit, jit_inline
from ..stdorder import HASHTABLE_BUCKET_COUNTS
from .heap import heap_pop, heap_push

__all__ = ["Scratch", "new_scratch", "scratch_sizes", "scratch_in", "build_bfs",
           "build_bfs_scheduled", "build_prob", "fill_result", "fill_layout", "BUCKET_COUNTS",
           "TREE_ROWS"]

#: libstdc++'s bucket counts as the tree kernels take them (passed in: one array, not a global).
BUCKET_COUNTS = np.asarray(HASHTABLE_BUCKET_COUNTS, dtype=np.int64)
#: Rows of a tree array: token, first child, next sibling, child count, bucket count, bucket.
TREE_ROWS = 6

#: Work arrays for drafting one request at a time (reused across a batch): the match kernel's
#: ``m_scratch``, the anchors ``a_nodes``/``a_depths``; the ``tree`` (``(TREE_ROWS, n)``:
#: libstdc++ map per node), ``order`` (rehash and layout queue), the BFS queue
#: ``q_par``/``q_breadth``/``q_node``, ``slot_parent`` (layout), the PROB heap
#: ``h_p``/``h_o``/``h_par``/``h_node`` (:mod:`~ngramspec.engine.heap`) and its top-k list
#: ``k_node``.  See :func:`new_scratch`.
Scratch = namedtuple("Scratch", "m_scratch a_nodes a_depths tree "
                                "order q_par q_breadth q_node slot_parent h_p h_o h_par h_node "
                                "k_node")


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
    return (3 * max_depth + (TREE_ROWS + 2) * n + 2 * (n + 1) + 3 * heap_cap + max_b, n,
            n + 1 + heap_cap)


@jit
def scratch_in(bufs, budget, max_depth, max_b):
    """A :data:`Scratch` of slices of ``bufs`` (int32, int64, float64 arrays at least
    :func:`scratch_sizes` long), which the caller keeps and reuses: measured, slicing costs a
    tenth of allocating the 14 arrays per call.  (The int64 buffer is no longer read.)"""
    b32, b64, bf = bufs
    n = budget + 1
    heap_cap = max_b * max_depth * (n + 1) + 1
    d = max_depth
    m_scratch, a_nodes, a_depths = b32[:d], b32[d:2 * d], b32[2 * d:3 * d]
    at = 3 * d
    tree = b32[at:at + TREE_ROWS * n].reshape((TREE_ROWS, n))
    at += TREE_ROWS * n
    order, slot_parent = b32[at:at + n], b32[at + n:at + 2 * n]
    at += 2 * n
    q_par, q_node = b32[at:at + n + 1], b32[at + n + 1:at + 2 * n + 2]
    at += 2 * n + 2
    h_par, h_node = b32[at:at + heap_cap], b32[at + heap_cap:at + 2 * heap_cap]
    h_o = b32[at + 2 * heap_cap:at + 3 * heap_cap]
    at += 3 * heap_cap
    k_node = b32[at:at + max_b]
    q_breadth, h_p = bf[:n + 1], bf[n + 1:n + 1 + heap_cap]
    return Scratch(m_scratch, a_nodes, a_depths, tree, order, q_par, q_breadth, q_node,
                   slot_parent, h_p, h_o, h_par, h_node, k_node)


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
def _map_insert(par, idx, token, tree, bucket_counts, order):
    """Child ``idx`` with ``token`` under ``par``, in libstdc++ ``unordered_map`` order: the
    first insert makes the first bucket count, an insert beyond the count rehashes to the next
    (replaying the list from the front, ``order``: work space of ``n``)."""
    tree[0, idx] = token
    tree[2, idx] = -1
    tree[1, idx] = -1
    tree[3, idx] = 0
    tree[4, idx] = 1
    bc = tree[4, par]
    threshold = 0 if bc == 1 else bc
    if tree[3, par] + 1 > threshold:
        new_bc = bc
        for c in bucket_counts:
            if c > bc:
                new_bc = c
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
            _place(tree, par, c, _bucket(tree[0, c], new_bc))
        tree[4, par] = new_bc
        bc = new_bc
    _place(tree, par, idx, _bucket(token, bc))
    tree[3, par] += 1


@jit_inline
def _map_get(par, token, tree):
    cur = tree[1, par]
    while cur != -1:
        if tree[0, cur] == token:
            return cur
        cur = tree[2, cur]
    return -1


@jit_inline
def _tree_reset(tree):
    tree[1, 0] = -1
    tree[3, 0] = 0
    tree[4, 0] = 1


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
    tree, order = sc.tree, sc.order
    q_par, q_breadth, q_node = sc.q_par, sc.q_breadth, sc.q_node
    _tree_reset(tree)
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
                pos = _map_get(par, tok[ch], tree)
                if pos == -1:
                    pos = cursor
                    _map_insert(par, pos, tok[ch], tree, bucket_counts, order)
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
def _prob_add(par, node, prob, top_k, tok, freq, c_head, c_next, k_node, h_p, h_o, h_par,
              h_node, size):
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
            heap_push(h_p, None, h_par, h_node, size, p, 0, par, k_node[j])
            size += 1
    return size


@jit_inline
def build_prob(n_anchors, budget, top_k, t, sc, bucket_counts):
    """Best-first expansion by path probability below the anchors of ``sc``; returns the
    drafted node count."""
    tok, freq, c_head, c_next = t.tok, t.freq, t.c_head, t.c_next
    anchor_nodes = sc.a_nodes
    tree, order = sc.tree, sc.order
    k_node, h_p, h_o, h_par, h_node = sc.k_node, sc.h_p, sc.h_o, sc.h_par, sc.h_node
    _tree_reset(tree)
    size = 0
    cursor = 1
    for a in range(n_anchors):
        # A full tree takes nothing more: the heap (and the remaining anchors, whose child
        # lists near the root are the longest) would only be walked for nothing.
        if cursor > budget:
            break
        size = _prob_add(0, anchor_nodes[a], 1.0, top_k, tok, freq, c_head, c_next, k_node,
                         h_p, h_o, h_par, h_node, size)
        while size > 0 and cursor <= budget:
            heap_pop(h_p, None, h_par, h_node, size)
            size -= 1
            p, par, node = h_p[size], h_par[size], h_node[size]
            pos = _map_get(par, tok[node], tree)
            if pos == -1:
                pos = cursor
                cursor += 1
                _map_insert(par, pos, tok[node], tree, bucket_counts, order)
                if cursor > budget:
                    break
            size = _prob_add(pos, node, p, top_k, tok, freq, c_head, c_next, k_node, h_p,
                             h_o, h_par, h_node, size)
    return cursor - 1


@jit_inline
def fill_result(last_token, n, sc, out_tokens, out_mask):
    """Level-order layout and ancestor mask of the tree in ``sc`` (any scratch bundle with
    ``tree``, ``order``, ``slot_parent``) into one request's row."""
    tree = sc.tree
    fill_layout(last_token, n, tree[0], tree[1], tree[2], sc.order, sc.slot_parent, out_tokens,
                out_mask)


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
