"""Corpus draft trees: BFS and PROB below a walk's anchors, and SGLang's merge of trees.

Part of the engine's external corpora (:mod:`ngramspec.engine.corpora.sam`).  A tree keeps its
children in libstdc++ ``unordered_map`` order (:mod:`ngramspec.engine.tree`'s model and
layout, each tree one 2-D int32 array); PROB pops its candidates
from the engine's heap (:mod:`ngramspec.engine.heap`).
"""

from __future__ import annotations

import numpy as np

from ..._jit import jit, jit_inline
from .automaton import _anchors, _n_kids
from ..heap import heap_pop, heap_push
from ..tree import BUCKET_COUNTS, TREE_ROWS, _map_get, _map_insert, _tree_reset, fill_layout

__all__ = ["merge_batch"]

_TREE_ROWS = TREE_ROWS  # a draft tree: one (TREE_ROWS, n) int32 array (engine.tree's model)


@jit
def _new_tree(n):
    return np.empty((_TREE_ROWS, n), np.int32)


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
                    _map_insert(par, pos, t, tree, BUCKET_COUNTS, order)
                    cursor += 1
                if tail < qcap:
                    q_par[tail] = pos
                    q_breadth[tail] = cb - scale
                    q_state[tail] = kd[lo + i, 1]
                    tail += 1
    return cursor - 1


@jit_inline
def _prob_add(par, s, prob, top_k, st, kd, sb, eb, h_p, h_o, h_par, h_kid, size):
    # A heap entry's payload: the tree parent and the kid's row in ``kd`` (token, target).
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
            heap_push(h_p, None, h_par, h_kid, size, float(kd[lo + j, 2]) / total * prob, 0, par,
                      lo + j)
            size += 1
    return size


@jit
def _prob(a_state, count, budget, top_k, st, kd, sb, eb, tree, order, h_p, h_o, h_par, h_kid):
    """§3.6.6: best-first by path probability (exact continuation counts), libstdc++ ties
    (the engine's heap, :mod:`~ngramspec.engine.heap`)."""
    _tree_reset(tree)
    size = 0
    cursor = 1
    for a in range(count):
        size = _prob_add(0, a_state[a], 1.0, top_k, st, kd, sb, eb, h_p, h_o, h_par, h_kid,
                         size)
        while size > 0 and cursor <= budget:
            heap_pop(h_p, None, h_par, h_kid, size)
            size -= 1
            p, par, e = h_p[size], h_par[size], h_kid[size]
            t = kd[e, 0]
            pos = _map_get(par, t, tree)
            if pos == -1:
                pos = cursor
                cursor += 1
                _map_insert(par, pos, t, tree, BUCKET_COUNTS, order)
            size = _prob_add(pos, kd[e, 1], p, top_k, st, kd, sb, eb, h_p, h_o, h_par, h_kid,
                             size)
    return cursor - 1


@jit(what="the corpus draft kernel")
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
    h_o = np.zeros(h_p.size, np.int32)
    h_par = np.empty(h_p.size, np.int32)
    h_kid = np.empty(h_p.size, np.int32)
    for b in range(offsets.size - 1):
        ctx = flat[offsets[b]:offsets[b + 1]]
        count = _anchors(ctx, max_depth, st, ed, rt, a_state, a_len)
        if prob:
            _prob(a_state, count, budget, max_b, st, kd, 0, 0, tree, order, h_p, h_o, h_par,
                  h_kid)
        else:
            _bfs(a_state, a_len, count, budget, max_depth, min_b, max_b, st, kd, 0, 0, tree,
                 order, q_par, q_breadth, q_state)
        _fill(ctx[ctx.size - 1], n, tree, order, slot_parent, out_tokens[b], out_mask[b])


# The merge --------------------------------------------------------------------------------------

@jit
def _mask_parents(mask, m, parent):
    """Each of the ``m`` slots' parent slot from a laid-out tree's ancestor mask: the last
    ancestor before it (-1 for the root)."""
    parent[0] = -1
    for i in range(1, m):
        j = i - 1
        while not mask[i, j]:
            j -= 1
        parent[i] = j


@jit
def _insert_leaf_paths(tokens, mask, tree, order, parent, is_parent, path, cursor, n):
    """Insert the leaf paths of one laid-out tree (§3.6.8); returns the new cursor."""
    m = tokens.size
    if m <= 1:
        return cursor
    _mask_parents(mask, m, parent)
    for i in range(m):
        is_parent[i] = False
    for i in range(1, m):
        is_parent[parent[i]] = True
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
            _map_insert(par, cursor, t, tree, BUCKET_COUNTS, order)
            par = cursor
            cursor += 1
    return cursor


@jit(what="the corpus merge kernel")
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
            _map_insert(at, cursor, t, tree, BUCKET_COUNTS, order)
            new_idx[slot] = cursor
            at = cursor
            cursor += 1
    return cursor


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
