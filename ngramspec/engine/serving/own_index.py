"""A request's own index (``local_index``): an online suffix automaton of its tokens, with the
exact occurrence counts and last positions of every n-gram up to the trie depth.

It replaces a depth-``D`` trie of every window (``D`` nodes per token, each touched ``D``
times): appending a token costs amortised O(1) automaton work plus one walk of at most ``D``
states, independent of the context's length, and the index holds at most ``2 L`` states and
``3 L`` transitions for ``L`` tokens.  It answers exactly what ADAPTIVE drafting asks of the
own trie (:mod:`ngramspec.reference.adaptive`, whose model is still that trie):

- the node of the context suffix of length ``d`` (``d < D``) is the state holding it: the
  tail state (the suffix of ``min(tokens, D - 1)`` tokens) or one reached by suffix links;
- its children are the state's transitions, each child's count the target state's
  occurrence count, and the trie's recency order of children (most recently touched first)
  is the order of their last occurrences, latest first: the target's last end position;
- a node ``D`` tokens deep has no children (the caller stops there).

Counts and last positions are kept exact for the states that hold a string of at most ``D``
tokens (``len(link) < D``); the walk that updates them after an append starts at the state of
the new suffix of ``D`` tokens, so states holding only longer strings are never walked (their
counts go stale, and nothing reads them: a state's shortest length only grows, and a clone
takes the shorter half of its state).

The index covers a window of the request's row, ``[base, end)``; tokens before ``count_from``
are indexed but not counted (``index_prompt=False``).  It holds at most ``window`` tokens:
appending to a full index first rebuilds it from the row's last ``window // 2`` tokens (a
documented degradation for requests longer than any model's context at the default capacity,
see :attr:`ngramspec.NgramConfig.own_window`); the reference models the same rule.

Arrays (:data:`OwnIndex`): ``st`` ``(S, 5)`` int32 state records (``S_*`` columns), ``ed``
``(E, 3)`` int32 transition records (``E_*`` columns; a state's transitions are a linked list
from its head), ``rh`` ``(H, 2)`` int32: the root's transitions in an open-addressing table
(token, target; token -1 empty) at most half full, since the root has one per distinct token,
and ``meta`` int64 (``O_*`` slots).  :class:`OwnIndexArrays` owns them, reserves them from a
known length and grows them (the append kernel stops and says so when it would run short).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..._jit import jit

__all__ = ["OwnIndex", "OwnIndexArrays", "own_append", "own_rebuilds", "own_reset",
           "own_state_of", "own_tail", "S_LEN", "S_LINK", "S_CNT", "S_LAST", "S_HEAD",
           "E_TOK", "E_TO", "E_NEXT"]

#: A state record: longest string's length, suffix link (-1 at the root), occurrence count,
#: last end position (absolute in the row), first transition (-1 none).
S_LEN, S_LINK, S_CNT, S_LAST, S_HEAD = range(5)
#: A transition record: token, target state, next transition of the same state (-1 none).
E_TOK, E_TO, E_NEXT = range(3)
# meta: states and transitions in use, root entries, the last state, the tail state and its
# length, the window's first row position, the row position indexed up to (exclusive), the
# first counted position, the trie depth, the window's token limit.
(O_STATES, O_EDGES, O_ROOT, O_LAST, O_TAIL, O_TAIL_LEN, O_BASE, O_END, O_COUNT_FROM, O_DEPTH,
 O_WINDOW) = range(11)
_META = 11

OwnIndex = namedtuple("OwnIndex", "st ed rh meta")


class OwnIndexArrays:
    """Owner of one own index's arrays: room for ``tokens`` tokens, reserved up front (its
    appends never allocate), and :meth:`grow` when more are wanted."""

    def __init__(self, depth: int, window: int, tokens: int = 64) -> None:
        self.depth, self.window = depth, window
        self.st = np.zeros((0, 5), np.int32)
        self.ed = np.zeros((0, 3), np.int32)
        self.rh = np.full((16, 2), -1, np.int32)
        self.meta = np.zeros(_META, np.int64)
        self.grow(tokens)
        self.grow_root(min(tokens, 256))
        self.meta[O_DEPTH] = depth
        self.meta[O_WINDOW] = window
        own_reset(self.bundle, 0, 0)

    @property
    def bundle(self) -> tuple:
        """The arrays as a plain tuple in :data:`OwnIndex` field order (what kernels take)."""
        return (self.st, self.ed, self.rh, self.meta)

    @property
    def nbytes(self) -> int:
        """Bytes held (reserved, not only used)."""
        return self.st.nbytes + self.ed.nbytes + self.rh.nbytes + self.meta.nbytes

    def reserve(self, tokens: int) -> None:
        """Room for ``tokens`` more tokens, allocated now: that many appends never grow
        anything (each adds at most two states, and ``n`` tokens have at most ``3 n + 4``
        transitions; new root entries are far fewer, and the root table, small, grows when
        it must)."""
        held = int(self.meta[O_END] - self.meta[O_BASE])
        whole = min(held + tokens, self.window)
        self._resize(int(self.meta[O_STATES]) + 2 * (whole - held) + 2, 3 * whole + 4)
        more = whole - held
        self.grow_root(int(self.meta[O_ROOT]) + min(more, 256))

    def reserve_whole(self, tokens: int) -> None:
        """Room for an index of ``tokens`` tokens in the worst case (``2 n + 2`` states,
        ``3 n + 4`` transitions, ``n`` distinct tokens): a request of known length (the
        compiled replay's) is then never short of room."""
        self._resize(2 * tokens + 2, 3 * tokens + 4)
        self.grow_root(tokens)

    def _resize(self, states: int, edges: int) -> None:
        used_s, used_e = int(self.meta[O_STATES]), int(self.meta[O_EDGES])
        if states > self.st.shape[0]:
            st = np.empty((states, 5), np.int32)
            st[:used_s] = self.st[:used_s]
            self.st = st
        if edges > self.ed.shape[0]:
            ed = np.empty((edges, 3), np.int32)
            ed[:used_e] = self.ed[:used_e]
            self.ed = ed

    def grow(self, tokens: int) -> None:
        """Room for a first build of ``tokens`` tokens: the transitions' worst case (so that
        no append counts what it adds first), states as text fills an automaton (about 1.6 a
        token; :meth:`make_room` adds more if it must)."""
        tokens = min(max(tokens, 1), self.window)
        self._resize(tokens * 17 // 10 + 4, 3 * tokens + 4)

    def grow_root(self, entries: int) -> None:
        """A root table that holds ``entries`` distinct tokens at most half full."""
        size = self.rh.shape[0]
        while size < 2 * entries + 2:
            size *= 2
        if size == self.rh.shape[0]:
            return
        old = self.rh
        self.rh = np.full((size, 2), -1, np.int32)
        _rehash(old, self.rh)

    def check(self) -> None:
        """Raise AssertionError unless the automaton's invariants hold: every suffix link
        leads to a shorter state, every transition to a state one token longer at least, the
        tail holds the window's last ``min(tokens, depth - 1)`` tokens, and the records in use
        fit the arrays and the bounds (``2 n`` states, ``3 n`` transitions)."""
        _check(self.bundle)

    def make_room(self) -> None:
        """After :func:`own_append` stopped short: half as much again of what ran short
        (growth by a constant factor: amortised)."""
        meta = self.meta
        states, edges = self.st.shape[0], self.ed.shape[0]
        if meta[O_END] - meta[O_BASE] >= self.window:  # a rebuild's worst case
            half = self.window // 2
            self._resize(max(states, 2 * half + 2), max(edges, 3 * half + 4))
        elif 2 * (int(meta[O_ROOT]) + 1) + 2 > self.rh.shape[0]:
            self.grow_root(2 * int(meta[O_ROOT]) + 2)
        elif meta[O_STATES] + 2 > states:
            self._resize(states * 3 // 2 + 4, edges)
        else:
            self._resize(states, edges * 3 // 2 + 64)


@jit
def _rehash(old, new):
    mask = new.shape[0] - 1
    for i in range(old.shape[0]):
        c = old[i, 0]
        if c == -1:
            continue
        j = (np.int64(c) * 2654435761) & mask
        while new[j, 0] != -1:
            j = (j + 1) & mask
        new[j, 0] = c
        new[j, 1] = old[i, 1]


@jit
def own_reset(o, base, count_from):
    """Empty the index (the root alone), its window starting at row position ``base``."""
    st, ed, rh, meta = o
    rh[:, 0] = -1
    st[0, S_LEN] = 0
    st[0, S_LINK] = -1
    st[0, S_CNT] = 0
    st[0, S_LAST] = -1
    st[0, S_HEAD] = -1
    meta[O_STATES] = 1
    meta[O_EDGES] = 0
    meta[O_ROOT] = 0
    meta[O_LAST] = 0
    meta[O_TAIL] = 0
    meta[O_TAIL_LEN] = 0
    meta[O_BASE] = base
    meta[O_END] = base
    meta[O_COUNT_FROM] = count_from


@jit
def _root_slot(rh, c):
    mask = rh.shape[0] - 1
    j = (np.int64(c) * 2654435761) & mask
    while rh[j, 0] != -1 and rh[j, 0] != c:
        j = (j + 1) & mask
    return j


@jit
def _target(st, ed, rh, p, c):
    """The state ``p`` reaches on token ``c``, or -1."""
    if p == 0:
        j = _root_slot(rh, c)
        return rh[j, 1] if rh[j, 0] == c else -1
    e = st[p, S_HEAD]
    while e != -1:
        if ed[e, E_TOK] == c:
            return ed[e, E_TO]
        e = ed[e, E_NEXT]
    return -1


@jit
def _find(st, ed, rh, p, c):
    """``(target, where)``: the state ``p`` reaches on token ``c`` (-1: none) and where that
    transition is held (the root table's slot, or the edge); a transition found below the
    head of ``p``'s list moves to its head (lists stay in the order of their last use,
    which shortens the scans of a long document's common states; no reader depends on the
    order: drafting ranks children by count and last position)."""
    if p == 0:
        j = _root_slot(rh, c)
        return (rh[j, 1] if rh[j, 0] == c else -1), j
    e = st[p, S_HEAD]
    prev = -1
    while e != -1:
        if ed[e, E_TOK] == c:
            if prev != -1:  # to the front
                ed[prev, E_NEXT] = ed[e, E_NEXT]
                ed[e, E_NEXT] = st[p, S_HEAD]
                st[p, S_HEAD] = e
            return ed[e, E_TO], e
        prev = e
        e = ed[e, E_NEXT]
    return -1, -1


@jit
def _add(st, ed, rh, meta, p, c, target):
    """A new transition ``p --c--> target`` (``p`` has none on ``c``)."""
    if p == 0:
        j = _root_slot(rh, c)
        rh[j, 0] = c
        rh[j, 1] = target
        meta[O_ROOT] += 1
        return
    e = meta[O_EDGES]
    meta[O_EDGES] = e + 1
    ed[e, E_TOK] = c
    ed[e, E_TO] = target
    ed[e, E_NEXT] = st[p, S_HEAD]
    st[p, S_HEAD] = e


@jit
def _new_state(st, meta, length, link, cnt, last):
    s = meta[O_STATES]
    meta[O_STATES] = s + 1
    st[s, S_LEN] = length
    st[s, S_LINK] = link
    st[s, S_CNT] = cnt
    st[s, S_LAST] = last
    st[s, S_HEAD] = -1
    return s


@jit
def _extend(st, ed, rh, meta, c, pos, counted):
    """Append token ``c`` at row position ``pos`` (Blumer et al.'s online construction), then
    count it: every state holding a suffix of at most ``D`` tokens gains the end ``pos``."""
    depth = meta[O_DEPTH]
    last = meta[O_LAST]
    cur = _new_state(st, meta, st[last, S_LEN] + 1, 0, 0, pos)
    p = last
    q = -1
    while p != -1:  # (each state's list scanned once: the look-up that finds q keeps it)
        q = _find(st, ed, rh, p, c)[0]
        if q != -1:
            break
        _add(st, ed, rh, meta, p, c, cur)
        p = st[p, S_LINK]
    split, clone = -1, -1
    if p != -1:
        if st[p, S_LEN] + 1 == st[q, S_LEN]:
            st[cur, S_LINK] = q
        else:
            clone = _new_state(st, meta, st[p, S_LEN] + 1, st[q, S_LINK], st[q, S_CNT],
                               st[q, S_LAST])
            e = st[q, S_HEAD]
            while e != -1:
                _add(st, ed, rh, meta, clone, ed[e, E_TOK], ed[e, E_TO])
                e = ed[e, E_NEXT]
            while p != -1:
                got, where = _find(st, ed, rh, p, c)
                if got != q:
                    break
                if p == 0:
                    rh[where, 1] = clone
                else:
                    ed[where, E_TO] = clone
                p = st[p, S_LINK]
            st[q, S_LINK] = clone
            st[cur, S_LINK] = clone
            split = q
    meta[O_LAST] = cur
    # The state of the old suffix of `tl` tokens (moved to the clone if it was split off),
    # then the new suffix of tl + 1 <= D tokens one transition on.
    t, tl = meta[O_TAIL], meta[O_TAIL_LEN]
    if t == split and tl <= st[clone, S_LEN]:
        t = clone
    u = _target(st, ed, rh, t, c)
    x = u
    while x > 0:
        if counted:
            st[x, S_CNT] += 1
        st[x, S_LAST] = pos
        x = st[x, S_LINK]
    if tl + 1 <= depth - 1:
        meta[O_TAIL] = u
        meta[O_TAIL_LEN] = tl + 1
    else:
        meta[O_TAIL] = u if st[st[u, S_LINK], S_LEN] < depth - 1 else st[u, S_LINK]
        meta[O_TAIL_LEN] = depth - 1


@jit
def _room(st, ed, rh, meta, c):
    """Whether appending ``c`` fits the arrays: two states, the transitions the append adds
    (counted first: one per state of the suffix chain without a ``c`` transition, plus a
    split state's transitions copied, one more if that state was on the chain) and a root
    entry."""
    if meta[O_STATES] + 2 > st.shape[0] or 2 * (meta[O_ROOT] + 1) + 2 > rh.shape[0]:
        return False
    if 3 * (meta[O_END] - meta[O_BASE] + 1) + 4 <= ed.shape[0]:
        return True  # an automaton of n tokens has at most 3 n - 4 transitions
    need = 0
    p = meta[O_LAST]
    while p != -1 and _target(st, ed, rh, p, c) == -1:
        need += 1 if p != 0 else 0
        p = st[p, S_LINK]
    if p != -1:
        q = _target(st, ed, rh, p, c)
        if st[p, S_LEN] + 1 != st[q, S_LEN]:
            need += 1  # q itself may be on the chain walked, and gain its c transition first
            e = st[q, S_HEAD]
            while e != -1:
                need += 1
                e = ed[e, E_NEXT]
    return meta[O_EDGES] + need <= ed.shape[0]


@jit
def own_append(o, row, stop, off):
    """Index the row's tokens from where the index stands (``end``) to ``stop``, ``row[i]``
    holding row position ``off + i``; a full window is first rebuilt from the row's last
    ``window // 2`` tokens (which ``row`` then holds: see :func:`own_rebuilds`).  Returns the
    position reached: less than ``stop`` when the arrays would run short (nothing half done:
    the caller makes room, :meth:`OwnIndexArrays.make_room`, and calls again)."""
    st, ed, rh, meta = o
    window = meta[O_WINDOW]
    pos = meta[O_END]
    while pos < stop:
        if pos - meta[O_BASE] >= window:
            half = window // 2
            if st.shape[0] < 2 * half + 2 or ed.shape[0] < 3 * half + 4:
                return pos  # the rebuild's worst case must fit before it starts
            base = pos - half
            count_from = meta[O_COUNT_FROM]
            own_reset(o, base, count_from)
            for q in range(base, pos):
                _extend(st, ed, rh, meta, row[q - off], q, q >= count_from)
            meta[O_END] = pos
        c = row[pos - off]
        if not _room(st, ed, rh, meta, c):
            return pos
        _extend(st, ed, rh, meta, c, pos, pos >= meta[O_COUNT_FROM])
        pos += 1
        meta[O_END] = pos
    return pos


@jit
def own_rebuilds(o, stop):
    """The first row position an append up to ``stop`` reads: where the index stands, or
    the start of the last rebuild's window if one happens on the way."""
    meta = o[3]
    window = meta[O_WINDOW]
    base, pos = meta[O_BASE], meta[O_END]
    first = pos
    while pos < stop:
        if pos - base >= window:
            base = pos - window // 2
            first = min(first, base)
        pos += 1
    return first


@jit
def own_tail(o):
    """The tail state (the suffix of ``min(tokens, D - 1)`` tokens) and that length."""
    meta = o[3]
    return meta[O_TAIL], meta[O_TAIL_LEN]


@jit
def own_state_of(st, tail, d):
    """The state holding the suffix of ``d`` tokens, ``d`` at most the tail's length."""
    x = tail
    while st[st[x, S_LINK], S_LEN] >= d:
        x = st[x, S_LINK]
    return x


@jit
def _check(o):
    st, ed, rh, meta = o
    n = meta[O_END] - meta[O_BASE]
    states, edges = meta[O_STATES], meta[O_EDGES]
    assert states <= st.shape[0] and edges <= ed.shape[0]
    assert states <= 2 * n + 1 and edges <= 3 * n + 1
    assert 2 * meta[O_ROOT] + 2 <= rh.shape[0]
    for x in range(1, states):
        link = st[x, S_LINK]
        assert 0 <= link < states and st[link, S_LEN] < st[x, S_LEN]
        assert st[x, S_CNT] >= 0
        e = st[x, S_HEAD]
        while e != -1:
            assert 0 <= e < edges
            to = ed[e, E_TO]
            assert 0 < to < states and st[to, S_LEN] >= st[x, S_LEN] + 1
            e = ed[e, E_NEXT]
    assert meta[O_TAIL_LEN] == min(n, meta[O_DEPTH] - 1)
    t = meta[O_TAIL]
    assert st[t, S_LEN] >= meta[O_TAIL_LEN]
    assert t == 0 or st[st[t, S_LINK], S_LEN] < meta[O_TAIL_LEN]
