"""Anchor matching kernels: SGLang 0.5.23's per-request ``MatchState`` (spec section 3.2), and
0.5.9's stateless match windows (:func:`window_anchors`, legacy spec section 3).

States live in a table of flat arrays, one row per state: epoch, processed total length, the
number of stored suffix references, and per suffix length ``d`` a (node, version) reference
(node -1 = absent).  Row 0 is scratch space for stateless matching.
"""

from __future__ import annotations

from .._jit import jit
from .trie import M_EPOCH, child_of

__all__ = ["match_anchors", "window_anchors"]


@jit
def _rebuild(ctx, total_len, s, max_depth, ver, ht_key, ht_val, meta, st_epoch, st_ptl, st_n,
             st_node, st_ver):
    n = ctx.size
    depth = min(n, max_depth)
    for d in range(1, depth + 1):
        cur = 0
        for k in range(n - d, n):
            cur = child_of(ht_key, ht_val, cur, ctx[k])
            if cur == -1:
                break
        st_node[s, d - 1] = cur
        st_ver[s, d - 1] = ver[cur] if cur != -1 else 0
    st_n[s] = depth
    st_epoch[s] = meta[M_EPOCH]
    st_ptl[s] = total_len


@jit
def _advance(appended, total_len, s, max_depth, ver, ht_key, ht_val, meta, st_epoch, st_ptl,
             st_n, st_node, st_ver, scratch):
    if st_epoch[s] != meta[M_EPOCH]:
        return False
    for d in range(st_n[s]):
        node = st_node[s, d]
        if node != -1 and ver[node] != st_ver[s, d]:
            return False
    for t in appended:
        width = min(st_n[s] + 1, max_depth)
        scratch[0] = child_of(ht_key, ht_val, 0, t)
        for d in range(1, width):
            ref = st_node[s, d - 1]
            # An absent suffix never reappears without a rebuild (SGLang's incremental rule).
            scratch[d] = -1 if ref == -1 else child_of(ht_key, ht_val, ref, t)
        for d in range(width):
            node = scratch[d]
            st_node[s, d] = node
            st_ver[s, d] = ver[node] if node != -1 else 0
        st_n[s] = width
    st_ptl[s] = total_len
    return True


@jit
def match_anchors(ctx, total_len, s, max_depth, ver, nchild, ht_key, ht_val, meta, st_epoch,
                  st_ptl, st_n, st_node, st_ver, scratch, out_nodes, out_depths):
    """Update state row ``s`` for ``ctx``; write expandable anchors longest first; count them."""
    ptl = st_ptl[s]
    forward = total_len >= ptl
    appended = total_len - ptl if forward else 0
    can = (st_epoch[s] == meta[M_EPOCH] and forward and appended <= ctx.size
           and st_n[s] == min(ptl, max_depth))
    if not (can and _advance(ctx[ctx.size - appended:], total_len, s, max_depth, ver, ht_key,
                             ht_val, meta, st_epoch, st_ptl, st_n, st_node, st_ver, scratch)):
        _rebuild(ctx, total_len, s, max_depth, ver, ht_key, ht_val, meta, st_epoch, st_ptl,
                 st_n, st_node, st_ver)
    count = 0
    for d in range(st_n[s], 0, -1):
        node = st_node[s, d - 1]
        if node != -1 and nchild[node] > 0:
            out_nodes[count] = node
            out_depths[count] = d
            count += 1
    return count


@jit
def window_anchors(ctx, min_w, max_w, nchild, ht_key, ht_val, out_nodes, out_depths):
    """SGLang 0.5.9's stateless anchors: the suffixes of ``min_w .. max_w`` tokens that are trie
    paths with children, longest first, written to ``out_*``; returns their count."""
    count = 0
    for w in range(min(ctx.size, max_w), min_w - 1, -1):
        cur = 0
        for k in range(ctx.size - w, ctx.size):
            cur = child_of(ht_key, ht_val, cur, ctx[k])
            if cur == -1:
                break
        if cur != -1 and nchild[cur] > 0:
            out_nodes[count] = cur
            out_depths[count] = w
            count += 1
    return count
