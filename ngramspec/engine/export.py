"""The engine's side of :mod:`ngramspec.cache.persist`: its trie and match states to and from the
backend-independent canonical form, whatever the slot layout.

Canonical form: the ``N`` non-root nodes numbered ``0 .. N-1`` in global LRU order (front =
most recently touched first), each with ``token``, ``parent`` (a canonical number, -1 = root;
always smaller than the node's own) and ``freq``.  Every parent's recency list is its children
in that same order (an invariant of inserts, checked by ``check_integrity``).  A match state's
suffix references are canonical numbers, -1 = absent, -2 = stale (evicted since, or from an
old epoch: the next match rebuilds it).
"""

from __future__ import annotations

import numpy as np

from .._jit import jit
from .match import new_states
from .trie import (M_EPOCH, M_FREEHEAD, M_FREETOP, M_GHEAD, M_GTAIL, M_SIZE, M_UNUSED,
                   TrieArrays, _ht_put)

__all__ = ["export_trie", "import_trie", "export_states", "import_states"]


@jit
def _export_kernel(tok, par, freq, g_next, head, number, out_tok, out_par, out_freq):
    k = 0
    g = head
    while g != -1:
        number[g] = k
        out_tok[k] = tok[g]
        p = par[g]
        out_par[k] = -1 if p == 0 else number[p]
        out_freq[k] = freq[g]
        k += 1
        g = g_next[g]
    return k


@jit
def _import_kernel(c_tok, c_par, c_freq, t, tail):
    tok, par, freq, c_head, c_next, c_prev = t.tok, t.par, t.freq, t.c_head, t.c_next, t.c_prev
    g_next, g_prev, ht = t.g_next, t.g_prev, t.ht
    n = c_tok.size
    for i in range(n):
        v = i + 1  # slot of canonical node i; slot 0 is the root
        p = c_par[i] + 1
        tok[v] = c_tok[i]
        par[v] = p
        freq[v] = c_freq[i]
        c_head[v] = -1
        # Appending in global order gives the recency order (most recent first).
        last = tail[p]
        c_prev[v] = last
        c_next[v] = -1
        if last == -1:
            c_head[p] = v
        else:
            c_next[last] = v
        tail[p] = v
        g_prev[v] = i if i > 0 else -1
        g_next[v] = i + 2 if i + 1 < n else -1
        _ht_put(ht, p, c_tok[i], v)


def export_trie(t: TrieArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(token, parent, freq, number)``: the canonical nodes, and each slot's number."""
    n = int(t.meta[M_SIZE]) - 1
    number = np.full(t.alloc, -1, np.int32)
    out = (np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.int32))
    k = _export_kernel(t.tok, t.par, t.freq, t.g_next, int(t.meta[M_GHEAD]), number, *out)
    if k != n:
        raise AssertionError(f"global LRU list holds {k} nodes, the trie {n}")
    return out[0], out[1], out[2], number


def import_trie(capacity: int, epoch: int, token: np.ndarray, parent: np.ndarray,
                freq: np.ndarray) -> TrieArrays:
    """A :class:`TrieArrays` holding validated canonical nodes (slot = number + 1)."""
    n = token.size
    t = TrieArrays(capacity, initial=max(1024, n + 1))
    tail = np.full(t.alloc, -1, np.int32)
    _import_kernel(token, parent, freq, t.named(), tail)
    m = t.meta
    m[M_SIZE] = m[M_UNUSED] = n + 1
    m[M_FREETOP] = 0
    m[M_FREEHEAD] = -1
    m[M_GHEAD] = 1 if n else -1
    m[M_GTAIL] = n if n else -1
    m[M_EPOCH] = epoch
    return t


def export_states(backend, number: np.ndarray):
    """``(keys, epoch, processed_total_len, n, refs)`` of the live match states, refs
    canonical (shape ``(S, trie depth)``, -1 absent, -2 stale or irrelevant)."""
    t = backend.trie
    cur = int(t.meta[M_EPOCH])
    depth = backend.config.trie_depth
    keys = list(backend._rows)
    s = len(keys)
    epoch, ptl = np.zeros(s, np.int64), np.zeros(s, np.int64)
    count, refs = np.zeros(s, np.int32), np.full((s, depth), -1, np.int32)
    st = backend.named_states
    for i, key in enumerate(keys):
        r = backend._rows[key]
        epoch[i], ptl[i], count[i] = st.epoch[r], st.ptl[r], st.n[r]
        for d in range(int(count[i])):
            node = int(st.node[r, d])
            if node == -1:
                continue
            fresh = epoch[i] == cur and st.ver[r, d] == t.ver[node]
            refs[i, d] = number[node] if fresh else -2
    return keys, epoch, ptl, count, refs


def import_states(backend, keys, epoch, ptl, count, refs) -> None:
    """Install validated canonical match states into a fresh backend."""
    rows = 16
    while rows < len(keys) + 1:
        rows *= 2
    backend.states = new_states(rows, backend.config.trie_depth)
    backend._rows = {key: i + 1 for i, key in enumerate(keys)}
    backend._free_rows = list(range(rows - 1, len(keys), -1))
    backend._last_keys = None
    st = backend.named_states
    for i in range(len(keys)):
        r = i + 1
        st.epoch[r], st.ptl[r], st.n[r] = epoch[i], ptl[i], count[i]
        for d in range(int(count[i])):
            ref = int(refs[i, d])
            if ref == -1:
                st.node[r, d], st.ver[r, d] = -1, 0
            elif ref == -2:  # the root never changes version: a version-0 reference to it
                st.node[r, d], st.ver[r, d] = 0, 0  # is stale forever
            else:
                st.node[r, d], st.ver[r, d] = ref + 1, 1
