"""Invariants of the flat-array trie and the match-state table, checked in plain Python.

A debugging and testing aid (:meth:`ngramspec.NgramCache.check_integrity`): it walks every
array once, so it costs O(nodes + table slots) Python steps.  Each failed check raises
:class:`~ngramspec.errors.IntegrityError` naming the invariant and the slot.

The invariants, all derived from :mod:`ngramspec.engine.trie`:

- counts: ``1 <= size <= capacity``, ``size == unused - free_top`` (slot 0 is the root, slots
  ``[1, unused)`` were handed out once, the free stack holds the ones given back);
- free list (threaded through ``g_next``): ``free top`` distinct slots in ``[1, unused)``;
- links: every live non-root node has a live parent, a depth ``<= trie depth``, ``freq >= 1``,
  and is found by the child table under ``(parent, token)``;
- child recency lists: doubly linked (``c_prev`` mirrors ``c_next``), children
  of that parent only, distinct tokens; together they hold every live non-root node once;
- frequencies: a non-root parent was on every path its children were on since they were
  created, so ``freq[parent] >= sum(freq[children])`` (not with ``exact_counts``, where a
  walked token may go uncounted and ``freq >= 0`` is all that holds);
- global LRU list: doubly linked from ``head`` to ``tail``, every live non-root node once, a
  parent ahead of each of its children (hence the back is a leaf and eviction removes leaves),
  and siblings in the same relative order as in their parent's recency list;
- child table: power-of-two size at least twice the node arrays (at least half empty), exactly
  ``size - 1`` entries, each a distinct live node found by a lookup of its own
  ``(parent, token)``;
- versions ``>= 1``; match states: rows distinct, disjoint from the free rows, lengths within
  the trie depth, epochs not in the future, and in the current epoch every reference that is
  not stale points at a live node.
"""

from __future__ import annotations

import numpy as np

from ..errors import IntegrityError
from .trie import (M_EPOCH, M_FREEHEAD, M_FREETOP, M_GHEAD, M_GTAIL, M_SIZE, M_UNUSED,
                   child_of)

__all__ = ["check_trie", "check_freqs", "check_states"]


def _fail(msg: str) -> None:
    raise IntegrityError(msg)


def check_trie(t, max_depth: int) -> np.ndarray:
    """Check a :class:`~ngramspec.engine.trie.TrieArrays` (all but frequencies, which depend on
    the config: :func:`check_freqs`); return the boolean live-slot mask."""
    m = t.meta
    size = int(m[M_SIZE])
    live = _live_slots(t)
    nodes = np.flatnonzero(live)[1:]  # live non-root slots
    _check_links(t, live, nodes, max_depth)
    _check_child_lists(t, live, nodes)
    _check_lru(t, live, nodes, size)
    _check_child_table(t, live, size)
    return live


def _live_slots(t) -> np.ndarray:
    """The counters, array shapes and free list checked; the boolean live-slot mask."""
    m = t.meta
    size, unused, top = int(m[M_SIZE]), int(m[M_UNUSED]), int(m[M_FREETOP])
    alloc = t.alloc
    if not 1 <= size <= t.capacity:
        _fail(f"node count {size} outside [1, capacity={t.capacity}]")
    if not (alloc <= t.capacity and 1 <= unused <= alloc and 0 <= top <= unused - 1):
        _fail(f"slot counters inconsistent: alloc {alloc}, unused {unused}, free top {top}, "
              f"capacity {t.capacity}")
    for name in ("tok", "par", "freq", "ver", "c_head", "c_next", "c_prev", "g_next",
                 "g_prev"):
        if getattr(t, name).shape != (alloc,):
            _fail(f"array {name} has shape {getattr(t, name).shape}, expected ({alloc},)")
    if size != unused - top:
        _fail(f"node count {size} != slots handed out ({unused}) - free slots ({top})")
    live = np.zeros(alloc, bool)
    live[:unused] = True
    free_list, f = [], int(m[M_FREEHEAD])
    while f != -1 and len(free_list) <= top:
        if not 1 <= f < unused:
            _fail(f"free list holds slot {f}, outside [1, {unused})")
        free_list.append(f)
        f = int(t.g_next[f])
    if len(free_list) != top:
        _fail(f"free list holds {len(free_list)}{'+' if f != -1 else ''} slots, expected {top}")
    free = np.asarray(free_list, np.int64)
    if np.unique(free).size != top:
        _fail("free list holds a slot twice")
    live[free] = False
    if (t.ver < 1).any():
        _fail(f"slot {int(np.flatnonzero(t.ver < 1)[0])} has a version below 1")
    return live


def _check_links(t, live: np.ndarray, nodes: np.ndarray, max_depth: int) -> None:
    """Parent links, depths and the child table seen from the nodes."""
    alloc = t.alloc
    # Links, depth, frequency and the child table seen from the nodes.
    depth = np.full(alloc, -1, np.int64)
    depth[0] = 0
    for v in nodes:
        v = int(v)
        p = int(t.par[v])
        if not (0 <= p < alloc and live[p]) or p == v:
            _fail(f"node {v} has parent {p}, which is not a live node")
        found = int(child_of(t.ht, t.par, t.tok, p, t.tok[v]))
        if found != v:
            _fail(f"child table maps (parent {p}, token {int(t.tok[v])}) to {found}, not to "
                  f"node {v}")
    for v in nodes:
        chain = []
        u = int(v)
        while depth[u] < 0:
            chain.append(u)
            u = int(t.par[u])
            if len(chain) > max_depth:
                _fail(f"node {int(v)} is deeper than the trie depth {max_depth} (or on a cycle)")
        for k, w in enumerate(reversed(chain), start=1):
            depth[w] = depth[u] + k
    if depth[nodes].max(initial=0) > max_depth:
        _fail(f"a node is deeper than the trie depth {max_depth}")


def _check_child_lists(t, live: np.ndarray, nodes: np.ndarray) -> None:
    """Each node's child recency list: live nodes, each once, its own children, links both
    ways, one child per token."""
    alloc = t.alloc
    seen = np.zeros(alloc, bool)
    for p in np.flatnonzero(live):
        p = int(p)
        count, prev, c = 0, -1, int(t.c_head[p])
        tokens = set()
        while c != -1:
            if not (0 <= c < alloc and live[c]) or c == 0:
                _fail(f"child list of node {p} reaches slot {c}, which is not a live node")
            if seen[c]:
                _fail(f"node {c} appears twice in child lists (second time under {p})")
            seen[c] = True
            if int(t.par[c]) != p:
                _fail(f"node {c} is in the child list of {p} but its parent is {int(t.par[c])}")
            if int(t.c_prev[c]) != prev:
                _fail(f"node {c}: c_prev is {int(t.c_prev[c])}, expected {prev}")
            if int(t.tok[c]) in tokens:
                _fail(f"node {p} has two children with token {int(t.tok[c])}")
            tokens.add(int(t.tok[c]))
            count += 1
            prev, c = c, int(t.c_next[c])
    missing = nodes[~seen[nodes]]
    if missing.size:
        _fail(f"node {int(missing[0])} is live but in no child list")


def _check_lru(t, live: np.ndarray, nodes: np.ndarray, size: int) -> None:
    """The global LRU list: every non-root node once, parents before children, child lists
    in its order."""
    m, alloc = t.meta, t.alloc
    pos = np.full(alloc, -1, np.int64)
    prev, g, k = -1, int(m[M_GHEAD]), 0
    while g != -1:
        if not (0 < g < alloc and live[g]):
            _fail(f"global LRU list reaches slot {g}, which is not a live non-root node")
        if pos[g] >= 0:
            _fail(f"node {g} appears twice in the global LRU list")
        if int(t.g_prev[g]) != prev:
            _fail(f"global LRU: g_prev of node {g} is {int(t.g_prev[g])}, expected {prev}")
        pos[g] = k
        k += 1
        prev, g = g, int(t.g_next[g])
    if int(m[M_GTAIL]) != prev:
        _fail(f"global LRU tail is {int(m[M_GTAIL])}, but the list ends at {prev}")
    if k != size - 1:
        _fail(f"global LRU list holds {k} nodes, expected {size - 1}")
    for v in nodes:
        p = int(t.par[v])
        if p != 0 and pos[p] > pos[v]:
            _fail(f"global LRU: parent {p} is behind its child {int(v)}")
    for p in np.flatnonzero(live):
        last, c = -1, int(t.c_head[p])
        while c != -1:
            if pos[c] < last:
                _fail(f"children of node {int(p)}: recency list and global LRU disagree at "
                      f"node {c}")
            last, c = int(pos[c]), int(t.c_next[c])


def _check_child_table(t, live: np.ndarray, size: int) -> None:
    """The child table as a whole (every live node is found under its own key: checked by
    :func:`_check_links`)."""
    alloc = t.alloc
    ht = t.ht
    if ht.size & (ht.size - 1) or ht.size < 2 * alloc:
        _fail(f"child table size {ht.size} is not a power of two at least 2 x {alloc} slots")
    used = ht != -1
    if int(used.sum()) != size - 1:
        _fail(f"child table holds {int(used.sum())} entries for {size - 1} non-root nodes")
    vals = ht[used].astype(np.int64)
    if vals.size and (vals.min() < 1 or vals.max() >= alloc or not live[vals].all()):
        _fail("child table holds a slot that is not a live non-root node")
    if np.unique(vals).size != vals.size:
        _fail("child table holds a node twice")


def check_freqs(t, live: np.ndarray, exact_counts: bool) -> None:
    """``freq >= 1`` and parents at least the sum of their children, or (``exact_counts``:
    some walked tokens go uncounted) just ``freq >= 0``."""
    nodes = np.flatnonzero(live)[1:]
    freq = t.freq[nodes].astype(np.int64)
    low = 0 if exact_counts else 1
    if freq.size and freq.min() < low:
        _fail(f"node {int(nodes[np.argmin(freq)])} has freq {int(freq.min())} < {low}")
    if exact_counts:
        return
    sums = np.zeros(t.alloc, np.int64)
    np.add.at(sums, t.par[nodes], freq)
    over = nodes[sums[nodes] > t.freq[nodes]]
    if over.size:
        p = int(over[0])
        _fail(f"node {p}: freq {int(t.freq[p])} < sum of its children's freqs {int(sums[p])}")


def check_states(backend, live: np.ndarray) -> None:
    """Check an :class:`~ngramspec.engine.backend.EngineBackend`'s frequencies
    (:func:`check_freqs`, under its config) and match-state table."""
    check_freqs(backend.trie, live, bool(getattr(backend.config, "exact_counts", False)))
    rows = list(backend._rows.values())
    free = list(backend._free_rows)
    st = backend.named_states
    n_rows = st.epoch.size
    depth = backend.config.trie_depth
    if len(set(rows)) != len(rows):
        _fail("two request ids share one match-state row")
    if len(set(free)) != len(free) or set(free) & set(rows):
        _fail("match-state free rows repeat or overlap rows in use")
    if any(not 1 <= r < n_rows for r in rows + free):
        _fail(f"a match-state row is outside [1, {n_rows})")
    t = backend.trie
    epoch = int(t.meta[M_EPOCH])
    for key, r in backend._rows.items():
        n = int(st.n[r])
        if not 0 <= n <= depth:
            _fail(f"match state of {key!r} stores {n} suffixes (trie depth {depth})")
        if int(st.epoch[r]) > epoch:
            _fail(f"match state of {key!r} is from epoch {int(st.epoch[r])}, after the "
                  f"trie's {epoch}")
        for d in range(n):
            node = int(st.node[r, d])
            if node == -1:
                continue
            if not 0 <= node < t.alloc:
                _fail(f"match state of {key!r} refers to slot {node} (arrays hold {t.alloc})")
            fresh = int(st.ver[r, d]) == int(t.ver[node])
            if int(st.ver[r, d]) > int(t.ver[node]):
                _fail(f"match state of {key!r} holds a version from the future for node {node}")
            if int(st.epoch[r]) == epoch and fresh and not live[node]:
                _fail(f"match state of {key!r} holds a fresh reference to free slot {node}")
