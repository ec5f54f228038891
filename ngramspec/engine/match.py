"""Anchor matching kernels: SGLang 0.5.23's per-request ``MatchState`` (spec section 3.2), and
0.5.9's stateless match windows (:func:`window_anchors`, legacy spec section 3).

States live in a table of flat arrays (the :data:`States` bundle), one row per state: epoch,
processed total length, the number of stored suffix references, and per suffix length ``d`` a
(node, version) reference (node -1 = absent).  Row 0 is scratch space for stateless matching.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .._jit import jit, jit_inline
from .trie import M_EPOCH, child_of

__all__ = ["States", "new_states", "match_anchors", "window_anchors"]

#: Match-state table, one row per state: ``epoch`` (int64), ``ptl`` (processed total length,
#: int64), ``n`` (stored suffix references, int32), ``node`` (int32, rows x trie depth, -1 =
#: absent), ``ver`` (int64, the node's version when stored).
States = namedtuple("States", "epoch ptl n node ver")


def new_states(rows: int, depth: int, old: tuple | None = None) -> tuple:
    """A plain tuple in :data:`States` field order with ``rows`` rows (``old`` copied in)."""
    new = (np.zeros(rows, np.int64), np.zeros(rows, np.int64), np.zeros(rows, np.int32),
           np.full((rows, depth), -1, np.int32), np.zeros((rows, depth), np.int64))
    if old is not None:
        k = old[0].size
        for a, b in zip(new, old):
            a[:k] = b
    return new


@jit_inline
def _rebuild(ctx, total_len, s, max_depth, t, st):
    n = ctx.size
    depth = min(n, max_depth)
    for d in range(1, depth + 1):
        cur = 0
        for k in range(n - d, n):
            cur = child_of(t.ht, t.par, t.tok, cur, ctx[k])
            if cur == -1:
                break
        st.node[s, d - 1] = cur
        st.ver[s, d - 1] = t.ver[cur] if cur != -1 else 0
    st.n[s] = depth
    st.epoch[s] = t.meta[M_EPOCH]
    st.ptl[s] = total_len


@jit_inline
def _advance(appended, total_len, s, max_depth, t, st, scratch):
    if st.epoch[s] != t.meta[M_EPOCH]:
        return False
    ver = t.ver
    for d in range(st.n[s]):
        node = st.node[s, d]
        if node != -1 and ver[node] != st.ver[s, d]:
            return False
    for tk in appended:
        width = min(st.n[s] + 1, max_depth)
        scratch[0] = child_of(t.ht, t.par, t.tok, 0, tk)
        for d in range(1, width):
            ref = st.node[s, d - 1]
            # An absent suffix never reappears without a rebuild (SGLang's incremental rule).
            scratch[d] = -1 if ref == -1 else child_of(t.ht, t.par, t.tok, ref, tk)
        for d in range(width):
            node = scratch[d]
            st.node[s, d] = node
            st.ver[s, d] = ver[node] if node != -1 else 0
        st.n[s] = width
    st.ptl[s] = total_len
    return True


@jit_inline
def match_anchors(ctx, total_len, s, max_depth, t, st, scratch, out_nodes, out_depths):
    """Update state row ``s`` of ``st`` (:data:`States`) for ``ctx`` on trie ``t``
    (:data:`~ngramspec.engine.trie.Trie`); write expandable anchors longest first; count them."""
    ptl = st.ptl[s]
    forward = total_len >= ptl
    appended = total_len - ptl if forward else 0
    can = (st.epoch[s] == t.meta[M_EPOCH] and forward and appended <= ctx.size
           and st.n[s] == min(ptl, max_depth))
    if not (can and _advance(ctx[ctx.size - appended:], total_len, s, max_depth, t, st,
                             scratch)):
        _rebuild(ctx, total_len, s, max_depth, t, st)
    count = 0
    for d in range(st.n[s], 0, -1):
        node = st.node[s, d - 1]
        if node != -1 and t.c_head[node] != -1:
            out_nodes[count] = node
            out_depths[count] = d
            count += 1
    return count


@jit
def window_anchors(ctx, min_w, max_w, t, out_nodes, out_depths):
    """SGLang 0.5.9's stateless anchors: the suffixes of ``min_w .. max_w`` tokens that are trie
    paths with children, longest first, written to ``out_*``; returns their count."""
    count = 0
    for w in range(min(ctx.size, max_w), min_w - 1, -1):
        cur = 0
        for k in range(ctx.size - w, ctx.size):
            cur = child_of(t.ht, t.par, t.tok, cur, ctx[k])
            if cur == -1:
                break
        if cur != -1 and t.c_head[cur] != -1:
            out_nodes[count] = cur
            out_depths[count] = w
            count += 1
    return count
