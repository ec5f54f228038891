"""Flat-array trie storage and its kernels: child hash, insert, leaf-only LRU eviction.

A node is an index into struct-of-arrays; -1 means "none".  Children of a node form a doubly
linked list in recency order (what BFS walks); all nodes form the global LRU list (front = most
recently touched) whose back is always a leaf; freed slots form a LIFO list threaded through
``g_next`` (a freed node is in no LRU list); child lookup by (parent, token) is an
open-addressing table of node indices with linear probing and backward-shift deletion (the key
of an entry is read back from the node's ``par``/``tok``).  Node arrays grow with the nodes
actually used, up to ``capacity``.

Bundles: the arrays travel between kernels as one :data:`Trie` named tuple.  Kernels called
from Python take the plain tuple :attr:`TrieArrays.bundle` (Numba types a plain tuple of arrays
in C; a named tuple costs a Python-level ``typeof`` per call) and rebuild the named view on
entry with ``Trie(*trie)``.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .._jit import jit, jit_inline

__all__ = ["Trie", "TrieArrays", "unpack", "insert_kernel", "insert_suffixes", "build_lru",
           "reset_trie", "in_use", "child_of", "M_SIZE", "M_GHEAD", "M_GTAIL", "M_UNUSED",
           "M_FREETOP", "M_EPOCH", "M_FREEHEAD", "META_SIZE", "LRU_STAMPS", "LRU_LIST",
           "LRU_NONE"]

# Slots of the int64 ``meta`` array.  M_FREETOP: number of free slots; M_FREEHEAD: the first.
M_SIZE, M_GHEAD, M_GTAIL, M_UNUSED, M_FREETOP, M_EPOCH, M_FREEHEAD = range(7)
META_SIZE = 7
# How an insert keeps the global LRU order (see insert_suffixes): touch stamps, the list, not
# at all.
LRU_STAMPS, LRU_LIST, LRU_NONE = 0, 1, 2

#: The trie's arrays.  Per node (length ``alloc``): ``tok``, ``par``, ``freq``, ``ver`` (int64,
#: bumped when the slot is freed), ``c_head``/``c_next``/``c_prev`` (recency list of children),
#: ``g_next``/``g_prev`` (global LRU list; ``g_next`` also links free slots), all int32 but
#: ``ver`` (a node has children iff ``c_head != -1``); all but ``g_next``/``g_prev`` are strided
#: columns of one record per node (:meth:`TrieArrays._allocate`); ``ht``: int32 child table of
#: node indices (-1 empty, size a power of two at least twice ``alloc``); ``meta``: int64
#: counters (``M_*``).
Trie = namedtuple("Trie", "tok par freq ver c_head c_next c_prev g_next g_prev ht meta")

_NODE_DTYPES = dict(tok=np.int32, par=np.int32, freq=np.int32, ver=np.int64, c_head=np.int32,
                    c_next=np.int32, c_prev=np.int32, g_next=np.int32, g_prev=np.int32)

# Fields of a node's 32-byte record (int32 columns; ``ver`` is the int64 at bytes 24..31).
_RECORD = ("tok", "par", "c_next", "freq", "c_head", "c_prev")
_RECORD_BYTES = 32
_LINE = 64


def _records(n: int) -> np.ndarray:
    """``(n, 8)`` int32 records starting on a cache-line boundary (two records per line)."""
    raw = np.empty(n * _RECORD_BYTES + _LINE, np.uint8)
    skip = -raw.ctypes.data % _LINE
    return raw[skip:skip + n * _RECORD_BYTES].view(np.int32).reshape(n, _RECORD_BYTES // 4)


class TrieArrays:
    """Owner of the trie's arrays; grows them before a kernel could run out of room.

    ``bundle``: the arrays as a plain tuple in :data:`Trie` field order (what kernels take),
    kept current when growth replaces an array.  ``packed``: the same arrays as the five that
    own them (the node records, ``g_next``, ``g_prev``, ``ht``, ``meta``), for the kernels called
    once per step whose dispatch should unbox few arrays (:func:`unpack`).
    """

    def __init__(self, capacity: int, initial: int = 1024) -> None:
        self.capacity = capacity
        self.alloc = 0
        n = min(capacity, initial)
        self.meta = np.zeros(META_SIZE, np.int64)
        for name, dtype in _NODE_DTYPES.items():
            setattr(self, name, np.zeros(0, dtype))
        self.ht = np.full(0, -1, np.int32)
        self._allocate(n)
        self._rehash(self._table_size(n))
        self.reset(first=True)

    def reset(self, first: bool = False) -> None:
        m = self.meta
        epoch = m[M_EPOCH] + 1 if not first else 1
        m[:] = 0
        m[M_EPOCH] = epoch
        m[M_SIZE] = 1
        m[M_GHEAD] = m[M_GTAIL] = m[M_FREEHEAD] = -1
        m[M_UNUSED] = 1  # slot 0 is the root
        self.c_head[0] = -1
        self.ht[:] = -1
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
        # What is read together shares a cache line: a node's fields but the global LRU links
        # live in one 32-byte record (columns of one (n, 8) array), aligned so that no record
        # straddles two lines.  A child lookup reads ``tok`` and ``par``, then matching reads
        # ``ver`` and ``c_head``; a walk over children reads ``tok``, ``c_next`` (PROB also
        # ``freq``); in a large trie each separate read would be a cache miss.
        # Growing copies the old records in one block and fills only the new slots: a copy
        # column by column of the strided views took 0.2 s at 10^6 nodes, stalling the insert
        # thread (and every match waiting on it) for that long.
        rec = _records(n)
        if old:
            rec[:old] = self.rec
        rec[old:] = -1
        rec.view(np.int64)[old:, 3] = 1  # ver
        self.rec = rec
        fields = {name: rec[:, i] for i, name in enumerate(_RECORD)}
        fields["ver"] = rec.view(np.int64)[:, 3]
        for name, dtype in _NODE_DTYPES.items():
            new = fields.get(name)
            if new is None:
                new = np.empty(n, dtype)
                new[:old] = getattr(self, name)
                new[old:] = -1
            setattr(self, name, new)
        self.alloc = n
        self._refresh()

    def _rehash(self, size: int) -> None:
        nodes = self.ht[self.ht >= 0]
        self.ht = np.full(size, -1, np.int32)
        _ht_bulk_insert(self.ht, self.par, self.tok, nodes)
        self._refresh()

    def _refresh(self) -> None:
        # Rebuilt only when an array is replaced: building it per call costs 1.5 us.
        self.bundle = tuple(getattr(self, f) for f in Trie._fields)
        self.packed = (self.rec, self.g_next, self.g_prev, self.ht, self.meta)

    def grow(self) -> None:
        """Double the node arrays (never beyond ``capacity``) and keep the table half empty."""
        if self.alloc >= self.capacity:
            raise AssertionError("a full-capacity trie never needs to grow")
        self._resize(min(self.capacity, 2 * self.alloc))

    def reserve(self) -> None:
        """Allocate every node slot of ``capacity`` now: the trie never grows afterwards."""
        if self.alloc < self.capacity:
            self._resize(self.capacity)

    def _resize(self, n: int) -> None:
        self._allocate(n)
        if self.ht.size < 2 * self.alloc:
            self._rehash(self._table_size(self.alloc))

    def named(self) -> Trie:
        return Trie(*self.bundle)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.bundle)


@jit_inline
def unpack(packed):
    """The :data:`Trie` view of :attr:`TrieArrays.packed` (views of the node records)."""
    rec, g_next, g_prev, ht, meta = packed
    return Trie(rec[:, 0], rec[:, 1], rec[:, 3], rec.view(np.int64)[:, 3], rec[:, 4],
                rec[:, 2], rec[:, 5], g_next, g_prev, ht, meta)


# Children of a node looked through before the child table (:func:`find_child`): most nodes
# have one or two children, whose slots lie near their parent's; the table's are scattered.
_SCAN = 4


@jit_inline
def _slot(parent, token, mask):
    # Multiplicative mixing that stays below 2**63, so plain Python (JIT off) never overflows.
    x = np.int64(parent) * np.int64(0x9E3779B1) + (np.int64(token) & np.int64(0xFFFFFFFF))
    x = x ^ (x >> np.int64(17))
    return x & mask


@jit
def _ht_bulk_insert(ht, par, tok, nodes):
    for i in range(nodes.size):
        v = nodes[i]
        _ht_put(ht, par[v], tok[v], v)


@jit_inline
def child_of(ht, par, tok, parent, token):
    """The child of ``parent`` with ``token``, or -1."""
    mask = ht.size - 1
    s = _slot(parent, token, mask)
    while True:
        v = ht[s]
        if v == -1:
            return -1
        if tok[v] == token and par[v] == parent:
            return v
        s = (s + 1) & mask


@jit_inline
def find_child(ht, par, tok, c_head, c_next, node, token):
    """The child of ``node`` with ``token``, or -1, as the insert and ADAPTIVE's anchor walks
    look it up: its first few children, then the child table (at the root too: its list
    starts with the children touched last, measured 20% faster for the insert than the table
    alone)."""
    ch = c_head[node]
    for _ in range(_SCAN):
        if ch == -1 or tok[ch] == token:
            break
        ch = c_next[ch]
    if ch == -1:
        return -1
    if tok[ch] == token:
        return ch
    return child_of(ht, par, tok, node, token)


@jit
def _ht_put(ht, parent, token, node):
    mask = ht.size - 1
    s = _slot(parent, token, mask)
    while ht[s] != -1:
        s = (s + 1) & mask
    ht[s] = node


@jit
def _ht_delete(ht, par, tok, node):
    mask = ht.size - 1
    s = _slot(par[node], tok[node], mask)
    while ht[s] != node:
        s = (s + 1) & mask
    # Backward-shift deletion keeps every probe chain unbroken without tombstones.
    hole = s
    j = s
    while True:
        j = (j + 1) & mask
        v = ht[j]
        if v == -1:
            break
        home = _slot(par[v], tok[v], mask)
        if (j > hole and (home <= hole or home > j)) or (j < hole and (home <= hole and home > j)):
            ht[hole] = v
            hole = j
    ht[hole] = -1


@jit
def _unlink(nxt, prv, ends, head_at, tail_at, node):
    """Take ``node`` out of a doubly linked list whose head is ``ends[head_at]`` and, unless
    ``tail_at < 0``, whose tail is ``ends[tail_at]``: a parent's child list (head only) and
    the global LRU list (both, in ``meta``)."""
    p = prv[node]
    n = nxt[node]
    if p == -1:
        ends[head_at] = n
    else:
        nxt[p] = n
    if n != -1:
        prv[n] = p
    elif tail_at >= 0:
        ends[tail_at] = p
    nxt[node] = -1
    prv[node] = -1


@jit
def _g_push(fwd, back, meta, node, end, other):
    """Link ``node`` in at the list's ``end`` (``meta`` slot), ``fwd`` pointing away from it:
    the front with (g_next, g_prev, M_GHEAD, M_GTAIL), the back with the four mirrored."""
    h = meta[end]
    fwd[node] = h
    back[node] = -1
    if h != -1:
        back[h] = node
    else:
        meta[other] = node
    meta[end] = node


@jit
def _g_push_front(g_next, g_prev, meta, node):
    _g_push(g_next, g_prev, meta, node, M_GHEAD, M_GTAIL)


@jit
def _g_push_back(g_next, g_prev, meta, node):
    _g_push(g_prev, g_next, meta, node, M_GTAIL, M_GHEAD)


@jit
def squeeze(t, count):
    """Evict ``count`` nodes from the back of the global LRU list (always leaves)."""
    meta = t.meta
    for _ in range(count):
        node = meta[M_GTAIL]
        _unlink(t.g_next, t.g_prev, meta, M_GHEAD, M_GTAIL, node)
        parent = t.par[node]
        _unlink(t.c_next, t.c_prev, t.c_head, parent, -1, node)
        _ht_delete(t.ht, t.par, t.tok, node)
        t.ver[node] += 1
        t.g_next[node] = meta[M_FREEHEAD]
        meta[M_FREEHEAD] = node
        meta[M_FREETOP] += 1
        meta[M_SIZE] -= 1


@jit
def insert_suffixes(seq, first, start, skip, count_from, max_depth, capacity, mode, clock, t,
                    path, pc, row):
    """Insert the suffixes ``first <= i < w - skip`` of ``seq`` (``w`` tokens; each suffix at
    most ``max_depth`` long) into the named trie ``t`` in order, SGLang's way: the walk touches
    (recency, LRU) every node of the suffix, creating the missing ones, and counts the tokens
    at positions ``>= count_from`` (those before are touched but not counted, and created
    with ``freq`` 0: ngramspec's exact counting; ``count_from`` 0 is SGLang's insert).  Before
    a suffix the least recently used leaves are evicted so that it fits in ``capacity``.

    Returns ``(stop, clock)``: the suffix to resume from (``w - skip`` when all went in;
    less when the node arrays ran out of allocated slots: the caller grows them and calls
    again from ``stop``) and the trie's touch clock.  ``path``: work space of ``max_depth``.
    Two shortcuts change nothing observable:

    - with ``row >= 0`` (else ``pc`` is only a placeholder of its types) the nodes of the
      previous insert of the same kind for that slot are remembered (``pc``, with versions
      while the trie can evict): the sequence moved forward, so most n-grams of this one were
      paths of the previous one and need no hash lookup (a stale node, evicted since, is
      looked up as usual).  ``start`` is the absolute position of ``seq`` in its request;
    - the global LRU list (read only by eviction) is kept as a list only in ``mode``
      LRU_LIST, which the caller sets from the first insert that could evict on.  Before that
      (LRU_STAMPS) each touch writes the ``clock`` (< 2**62) into the node's LRU links instead
      (``g_next`` its high bits, ``g_prev`` its low 31); :func:`build_lru` turns those stamps
      into the very list the linked moves would have made (a touch moves a node to the
      front).  In LRU_NONE the caller has proven that this trie cannot evict for the rest of
      the run: nothing is kept.  Without eviction no node goes stale, so remembered nodes need
      version checks only in LRU_LIST.
    """
    tok, par, freq, ver, c_head, c_next, c_prev = (t.tok, t.par, t.freq, t.ver, t.c_head,
                                                   t.c_next, t.c_prev)
    g_next, g_prev, ht, meta = t.g_next, t.g_prev, t.ht, t.meta
    pc_node, pc_ver, pc_start, pc_len = pc
    alloc = tok.size
    w = seq.size
    old_start = 0
    old_len = 0
    if row >= 0:
        old_start = pc_start[row]
        old_len = pc_len[row]
    known_end = old_len - skip  # the previous insert's suffixes are those before this
    # The sibling moves are spelled out rather than calling the trie's helpers: a helper with
    # a loop, inlined here, made Numba count references to its array arguments at every node
    # (measured once: half of the replay's time).  The table's probe (child_of) and put
    # (_ht_put) are shared: measured A/B, the replay and bulk insert kept their speed.
    for i in range(first, w - skip):
        length = min(w - i, max_depth)
        free_count = capacity - meta[M_SIZE]
        if length > free_count:
            squeeze(t, length - free_count)
        if meta[M_FREETOP] + (alloc - meta[M_UNUSED]) < length:
            return i, clock
        oi = start + i - old_start
        known = min(old_len - oi, max_depth) if 0 <= oi < known_end else 0
        cur = 0
        fresh = False  # below a node created just now there is nothing to look up
        for k in range(length):
            tk = seq[i + k]
            child = -1
            if k < known:
                cand = pc_node[row, oi, k]
                if mode != LRU_LIST or ver[cand] == pc_ver[row, oi, k]:
                    child = cand
            if child == -1 and not fresh:
                child = find_child(ht, par, tok, c_head, c_next, cur, tk)
            if child == -1:
                if meta[M_FREETOP] > 0:
                    meta[M_FREETOP] -= 1
                    child = meta[M_FREEHEAD]
                    meta[M_FREEHEAD] = g_next[child]
                else:
                    child = meta[M_UNUSED]
                    meta[M_UNUSED] += 1
                meta[M_SIZE] += 1
                tok[child] = tk
                par[child] = cur
                freq[child] = 1 if i + k >= count_from else 0
                c_head[child] = -1
                _ht_put(ht, cur, tk, child)
                h = c_head[cur]  # the front of its siblings
                c_next[child] = h
                c_prev[child] = -1
                if h != -1:
                    c_prev[h] = child
                c_head[cur] = child
                if mode == LRU_LIST:
                    _g_push_back(g_next, g_prev, meta, child)
                fresh = True
            else:
                if i + k >= count_from:
                    freq[child] += 1
                h = c_head[cur]
                if h != child:  # to the front of its siblings (trie's unlink + push front)
                    p = c_prev[child]
                    nx = c_next[child]
                    c_next[p] = nx  # p != -1: child is not the head
                    if nx != -1:
                        c_prev[nx] = p
                    c_next[child] = h
                    c_prev[child] = -1
                    c_prev[h] = child
                    c_head[cur] = child
            path[k] = child
            cur = child
        if mode == LRU_LIST:
            for k in range(length - 1, -1, -1):
                node = path[k]
                if meta[M_GHEAD] != node:
                    _unlink(g_next, g_prev, meta, M_GHEAD, M_GTAIL, node)
                    _g_push_front(g_next, g_prev, meta, node)
        elif mode == LRU_STAMPS:
            for k in range(length - 1, -1, -1):
                clock += 1
                node = path[k]  # the touch stamp in its two int32 LRU links
                g_next[node] = clock >> 31
                g_prev[node] = clock & 0x7FFFFFFF
        if row >= 0:
            # Remember this suffix's nodes (the reads of old entries came first: oi >= i).
            for k in range(length):
                pc_node[row, i, k] = path[k]
                if mode == LRU_LIST:
                    pc_ver[row, i, k] = ver[path[k]]
    if row >= 0:
        pc_start[row] = start
        pc_len[row] = w
    return w - skip, clock


@jit
def build_lru(t):
    """The global LRU list from the touch stamps (front: the latest touch).  Every slot below
    ``M_UNUSED`` but the root holds a live node: nothing was freed before the first eviction."""
    g_next, g_prev, meta = t.g_next, t.g_prev, t.meta
    used = meta[M_UNUSED]
    stamps = np.empty(used - 1, np.int64)
    for v in range(1, used):
        stamps[v - 1] = (np.int64(g_next[v]) << 31) | np.int64(g_prev[v])
    order = np.argsort(stamps)  # oldest first: the back of the list
    prev = -1
    for j in range(used - 2, -1, -1):
        v = order[j] + 1
        g_prev[v] = prev
        if prev == -1:
            meta[M_GHEAD] = v
        else:
            g_next[prev] = v
        prev = v
    if prev == -1:
        meta[M_GHEAD] = -1
    else:
        g_next[prev] = -1
    meta[M_GTAIL] = prev


@jit(what="the trie insert kernel")
def insert_kernel(flat, offsets, starts_from, count_from, max_depth, capacity, trie, path, pos,
                  lru):
    """Insert every sequence ``flat[offsets[s]:offsets[s+1]]`` in order, SGLang's way
    (:func:`insert_suffixes`; ``lru``: int64 ``[mode, clock, ...]``, how the trie keeps its
    LRU order (``LRU_LIST``, or ``LRU_STAMPS`` when the caller has made sure that this call
    cannot evict) and its touch clock, updated).

    Suffix starts are every ``i`` with ``i + starts_from < len`` (0 = every suffix, the last
    token alone included).  Only the tokens at positions ``>= count_from[s]`` of sequence ``s``
    are counted.  ``trie``: :attr:`TrieArrays.bundle`.

    Work starts at sequence ``pos[0]``, suffix ``pos[1]``.  Returns False, with ``pos`` at the
    suffix to resume from, when the node arrays are full: the caller grows them and calls again
    (memory follows use, not ``capacity``).
    """
    t = Trie(*trie)
    none = (np.empty((1, 1, 1), np.int32), np.empty((1, 1, 1), np.int64),
            np.empty(1, np.int64), np.empty(1, np.int64))
    # int64, not literal, arguments: Numba compiles a callee once per literal value.
    zero, mode, no_row = np.int64(0), lru[0], np.int64(-1)
    for s in range(pos[0], offsets.size - 1):
        seq = flat[offsets[s]:offsets[s + 1]]
        first = pos[1] if s == pos[0] else 0
        stop, lru[1] = insert_suffixes(seq, first, zero, starts_from, count_from[s], max_depth,
                                       capacity, mode, lru[1], t, path, none, no_row)
        if stop < seq.size - starts_from:
            pos[0] = s
            pos[1] = stop
            return False
    pos[0] = offsets.size - 1
    pos[1] = 0
    return True


@jit
def reset_trie(t):
    """An empty trie (``TrieArrays.reset`` without the epoch: local tries match statelessly)."""
    meta = t.meta
    meta[M_SIZE] = 1
    meta[M_GHEAD] = -1
    meta[M_GTAIL] = -1
    meta[M_FREEHEAD] = -1
    meta[M_UNUSED] = 1
    meta[M_FREETOP] = 0
    t.c_head[0] = -1
    t.ht[:] = -1


@jit
def in_use(t):
    """Node slots taken (live nodes and the root; freed slots excluded)."""
    return t.meta[M_UNUSED] - t.meta[M_FREETOP]
