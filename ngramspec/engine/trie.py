"""Flat-array trie storage and its kernels: child hash, insert, leaf-only LRU eviction.

A node is an index into struct-of-arrays; -1 means "none".  Children of a node form a doubly
linked list in recency order (what BFS walks); all nodes form the global LRU list (front = most
recently touched) whose back is always a leaf; freed slots go on a LIFO stack; child lookup by
(parent, token) is an open-addressing table with linear probing and backward-shift deletion.
Node arrays grow with the nodes actually used, up to ``capacity``.
"""

from __future__ import annotations

import numpy as np

from .._jit import jit

__all__ = ["TrieArrays", "insert_kernel", "insert_counted_kernel", "M_SIZE", "M_GHEAD",
           "M_GTAIL", "M_UNUSED", "M_FREETOP", "M_EPOCH", "M_HTCOUNT"]

# Slots of the int64 ``meta`` array.
M_SIZE, M_GHEAD, M_GTAIL, M_UNUSED, M_FREETOP, M_EPOCH, M_HTCOUNT = range(7)


class TrieArrays:
    """Owner of the trie's arrays; grows them before a kernel could run out of room."""

    def __init__(self, capacity: int, initial: int = 1024) -> None:
        self.capacity = capacity
        self.alloc = 0
        n = min(capacity, initial)
        self.tok = np.zeros(0, np.int32)
        self.meta = np.zeros(7, np.int64)
        self._allocate(n)
        self.ht_key = np.full(0, -1, np.int64)
        self.ht_val = np.full(0, -1, np.int32)
        self._rehash(self._table_size(n))
        self.reset(first=True)

    def reset(self, first: bool = False) -> None:
        m = self.meta
        epoch = m[M_EPOCH] + 1 if not first else 1
        m[:] = 0
        m[M_EPOCH] = epoch
        m[M_SIZE] = 1
        m[M_GHEAD] = m[M_GTAIL] = -1
        m[M_UNUSED] = 1  # slot 0 is the root
        self.c_head[0] = -1
        self.nchild[0] = 0
        self.ht_key[:] = -1
        self.ht_val[:] = -1
        # Versions survive a reset: stored references to old slots must still read as stale
        # even across epochs (the epoch check catches them first, as in SGLang).

    @staticmethod
    def _table_size(nodes: int) -> int:
        size = 16
        while size < 2 * nodes:
            size *= 2
        return size

    def _allocate(self, n: int) -> None:
        old = self.alloc
        specs = dict(tok=np.int32, par=np.int32, freq=np.int32, ver=np.int64, c_head=np.int32,
                     c_next=np.int32, c_prev=np.int32, nchild=np.int32, g_next=np.int32,
                     g_prev=np.int32, free=np.int32)
        for name, dtype in specs.items():
            new = np.full(n, -1, dtype) if name != "ver" else np.ones(n, dtype)
            if old:
                new[:old] = getattr(self, name)
            setattr(self, name, new)
        self.alloc = n

    def _rehash(self, size: int) -> None:
        keys = self.ht_key[self.ht_key >= 0] if self.ht_key.size else self.ht_key
        vals = self.ht_val[self.ht_key >= 0] if self.ht_key.size else self.ht_val
        self.ht_key = np.full(size, -1, np.int64)
        self.ht_val = np.full(size, -1, np.int32)
        _ht_bulk_insert(self.ht_key, self.ht_val, keys, vals)

    def grow(self) -> None:
        """Double the node arrays (never beyond ``capacity``) and keep the table half empty."""
        if self.alloc >= self.capacity:
            raise AssertionError("a full-capacity trie never needs to grow")
        self._allocate(min(self.capacity, 2 * self.alloc))
        if self.ht_key.size < 2 * self.alloc:
            self._rehash(self._table_size(self.alloc))

    def arrays(self):
        return (self.tok, self.par, self.freq, self.ver, self.c_head, self.c_next, self.c_prev,
                self.nchild, self.g_next, self.g_prev, self.free, self.ht_key, self.ht_val,
                self.meta)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays())


@jit
def _key(parent, token):
    return (np.int64(parent) << np.int64(32)) | (np.int64(token) & np.int64(0xFFFFFFFF))


@jit
def _slot(key, mask):
    # Multiplicative mixing that stays below 2**63, so plain Python (JIT off) never overflows.
    x = (key >> np.int64(32)) * np.int64(0x9E3779B1) + (key & np.int64(0xFFFFFFFF))
    x = x ^ (x >> np.int64(17))
    return x & mask


@jit
def _ht_bulk_insert(ht_key, ht_val, keys, vals):
    mask = ht_key.size - 1
    for i in range(keys.size):
        s = _slot(keys[i], mask)
        while ht_key[s] != -1:
            s = (s + 1) & mask
        ht_key[s] = keys[i]
        ht_val[s] = vals[i]


@jit
def child_of(ht_key, ht_val, parent, token):
    """The child of ``parent`` with ``token``, or -1."""
    key = _key(parent, token)
    mask = ht_key.size - 1
    s = _slot(key, mask)
    while True:
        k = ht_key[s]
        if k == key:
            return ht_val[s]
        if k == -1:
            return -1
        s = (s + 1) & mask


@jit
def _ht_put(ht_key, ht_val, parent, token, node):
    key = _key(parent, token)
    mask = ht_key.size - 1
    s = _slot(key, mask)
    while ht_key[s] != -1:
        s = (s + 1) & mask
    ht_key[s] = key
    ht_val[s] = node


@jit
def _ht_delete(ht_key, ht_val, parent, token):
    key = _key(parent, token)
    mask = ht_key.size - 1
    s = _slot(key, mask)
    while ht_key[s] != key:
        s = (s + 1) & mask
    # Backward-shift deletion keeps every probe chain unbroken without tombstones.
    hole = s
    j = s
    while True:
        j = (j + 1) & mask
        if ht_key[j] == -1:
            break
        home = _slot(ht_key[j], mask)
        if (j > hole and (home <= hole or home > j)) or (j < hole and (home <= hole and home > j)):
            ht_key[hole] = ht_key[j]
            ht_val[hole] = ht_val[j]
            hole = j
    ht_key[hole] = -1
    ht_val[hole] = -1


@jit
def _unlink_child(c_head, c_next, c_prev, parent, node):
    p = c_prev[node]
    n = c_next[node]
    if p == -1:
        c_head[parent] = n
    else:
        c_next[p] = n
    if n != -1:
        c_prev[n] = p
    c_next[node] = -1
    c_prev[node] = -1


@jit
def _push_child_front(c_head, c_next, c_prev, parent, node):
    h = c_head[parent]
    c_next[node] = h
    c_prev[node] = -1
    if h != -1:
        c_prev[h] = node
    c_head[parent] = node


@jit
def _g_unlink(g_next, g_prev, meta, node):
    p = g_prev[node]
    n = g_next[node]
    if p == -1:
        meta[M_GHEAD] = n
    else:
        g_next[p] = n
    if n == -1:
        meta[M_GTAIL] = p
    else:
        g_prev[n] = p
    g_next[node] = -1
    g_prev[node] = -1


@jit
def _g_push_front(g_next, g_prev, meta, node):
    h = meta[M_GHEAD]
    g_next[node] = h
    g_prev[node] = -1
    if h != -1:
        g_prev[h] = node
    else:
        meta[M_GTAIL] = node
    meta[M_GHEAD] = node


@jit
def _g_push_back(g_next, g_prev, meta, node):
    t = meta[M_GTAIL]
    g_prev[node] = t
    g_next[node] = -1
    if t != -1:
        g_next[t] = node
    else:
        meta[M_GHEAD] = node
    meta[M_GTAIL] = node


@jit
def _squeeze(count, tok, par, ver, c_head, c_next, c_prev, nchild, g_next, g_prev, free,
             ht_key, ht_val, meta):
    for _ in range(count):
        node = meta[M_GTAIL]
        _g_unlink(g_next, g_prev, meta, node)
        parent = par[node]
        _unlink_child(c_head, c_next, c_prev, parent, node)
        nchild[parent] -= 1
        _ht_delete(ht_key, ht_val, parent, tok[node])
        ver[node] += 1
        free[meta[M_FREETOP]] = node
        meta[M_FREETOP] += 1
        meta[M_SIZE] -= 1


@jit
def insert_kernel(flat, offsets, starts_from, max_depth, capacity, tok, par, freq, ver, c_head,
                  c_next, c_prev, nchild, g_next, g_prev, free, ht_key, ht_val, meta, path, pos):
    """Insert every sequence ``flat[offsets[s]:offsets[s+1]]`` in order, SGLang's way.

    Suffix starts are every ``i`` with ``i + starts_from < len`` (0 = every suffix, the last
    token alone included).  Work starts at sequence ``pos[0]``, suffix ``pos[1]``.  Returns
    False, with ``pos`` at the suffix to resume from, when the node arrays are full: the
    caller grows them and calls again (memory follows use, not ``capacity``).
    """
    count_from = np.zeros(offsets.size - 1, np.int64)
    return insert_counted_kernel(flat, offsets, starts_from, count_from, max_depth, capacity,
                                 tok, par, freq, ver, c_head, c_next, c_prev, nchild, g_next,
                                 g_prev, free, ht_key, ht_val, meta, path, pos)


@jit
def insert_counted_kernel(flat, offsets, starts_from, count_from, max_depth, capacity, tok, par,
                          freq, ver, c_head, c_next, c_prev, nchild, g_next, g_prev, free,
                          ht_key, ht_val, meta, path, pos):
    """:func:`insert_kernel` that counts only the tokens at positions ``>= count_from[s]`` of
    sequence ``s``: a walked node whose token lies before that is touched (recency, LRU) but its
    ``freq`` is not incremented, and is created with ``freq`` 0 (ngramspec's exact counting;
    ``count_from`` of zeros is SGLang's insert)."""
    alloc = tok.size
    for s in range(pos[0], offsets.size - 1):
        lo = offsets[s]
        n = offsets[s + 1] - lo
        first = pos[1] if s == pos[0] else 0
        counted = count_from[s]
        for i in range(first, n):
            if i + starts_from >= n:
                break
            length = min(n - i, max_depth)
            free_count = capacity - meta[M_SIZE]
            if length > free_count:
                _squeeze(length - free_count, tok, par, ver, c_head, c_next, c_prev, nchild,
                         g_next, g_prev, free, ht_key, ht_val, meta)
            if meta[M_FREETOP] + (alloc - meta[M_UNUSED]) < length:
                pos[0] = s
                pos[1] = i
                return False
            cur = 0
            for k in range(length):
                t = flat[lo + i + k]
                child = child_of(ht_key, ht_val, cur, t)
                if child == -1:
                    if meta[M_FREETOP] > 0:
                        meta[M_FREETOP] -= 1
                        child = free[meta[M_FREETOP]]
                    else:
                        child = meta[M_UNUSED]
                        meta[M_UNUSED] += 1
                    meta[M_SIZE] += 1
                    tok[child] = t
                    par[child] = cur
                    freq[child] = 1 if i + k >= counted else 0
                    c_head[child] = -1
                    nchild[child] = 0
                    _ht_put(ht_key, ht_val, cur, t, child)
                    _push_child_front(c_head, c_next, c_prev, cur, child)
                    nchild[cur] += 1
                    _g_push_back(g_next, g_prev, meta, child)
                else:
                    if i + k >= counted:
                        freq[child] += 1
                    if c_head[cur] != child:
                        _unlink_child(c_head, c_next, c_prev, cur, child)
                        _push_child_front(c_head, c_next, c_prev, cur, child)
                path[k] = child
                cur = child
            for k in range(length - 1, -1, -1):
                node = path[k]
                if meta[M_GHEAD] != node:
                    _g_unlink(g_next, g_prev, meta, node)
                    _g_push_front(g_next, g_prev, meta, node)
    pos[0] = offsets.size - 1
    pos[1] = 0
    return True
