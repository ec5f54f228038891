"""The engine's one priority queue: libstdc++'s binary max-heap (``push_heap``/``pop_heap``).

PROB trees (the trie's, :mod:`ngramspec.engine.tree`, and the corpora's,
:mod:`ngramspec.engine.corpora.corpus_tree`) pop equal probabilities in the order SGLang's
``std::priority_queue`` does, so the heap moves exactly as libstdc++'s does (the readable model
is :class:`ngramspec.stdorder.StdPriorityQueue`).  ADAPTIVE (:mod:`ngramspec.engine.adaptive`)
breaks ties by push order, a key of its own: any correct heap pops its candidates in one order.

An entry is ``(p, o, par, node)`` in four parallel arrays: the priority ``p`` (float64), the
tie key ``o`` (larger pops later among equal ``p``), and two payload ints (the tree parent and
the node the entry expands).  SGLang's trees have no tie key: they pass ``h_o=None``, and
Numba compiles that variant without the key (the ``h_o is None`` branches are pruned), so the
PROB heap moves no more than libstdc++'s.
"""

from __future__ import annotations

from .._jit import jit

__all__ = ["heap_push", "heap_pop"]


@jit
def heap_push(h_p, h_o, h_par, h_node, hole, p, o, par, node):
    """libstdc++ ``__push_heap``: entry ``(p, o, par, node)`` into the hole at ``hole`` (the
    heap's size for a push), moved up past every parent that sorts below it."""
    while hole > 0:
        up = (hole - 1) // 2
        if h_o is None:
            if not h_p[up] < p:
                break
        elif not (h_p[up] < p or (h_p[up] == p and h_o[up] > o)):
            break
        h_p[hole], h_par[hole], h_node[hole] = h_p[up], h_par[up], h_node[up]
        if h_o is not None:
            h_o[hole] = h_o[up]
        hole = up
    h_p[hole], h_par[hole], h_node[hole] = p, par, node
    if h_o is not None:
        h_o[hole] = o


@jit
def heap_pop(h_p, h_o, h_par, h_node, size):
    """libstdc++ ``pop_heap`` on ``[0, size)``: the top ends at index ``size - 1`` (the caller
    reads it there, or at 0 before the call)."""
    last = size - 1
    vp, vpar, vnode = h_p[last], h_par[last], h_node[last]
    h_p[last], h_par[last], h_node[last] = h_p[0], h_par[0], h_node[0]
    vo = 0
    if h_o is not None:
        vo = h_o[last]
        h_o[last] = h_o[0]
    length = last
    hole = 0
    child = 0
    # __adjust_heap: the hole goes down to a leaf along the larger children, then the last
    # entry goes back up from there.
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if h_o is None:
            if h_p[child] < h_p[child - 1]:
                child -= 1
        elif h_p[child] < h_p[child - 1] or (h_p[child] == h_p[child - 1]
                                             and h_o[child] > h_o[child - 1]):
            child -= 1
        _move(h_p, h_o, h_par, h_node, hole, child)
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1) - 1
        _move(h_p, h_o, h_par, h_node, hole, child)
        hole = child
    heap_push(h_p, h_o, h_par, h_node, hole, vp, vo, vpar, vnode)


@jit
def _move(h_p, h_o, h_par, h_node, to, frm):
    h_p[to], h_par[to], h_node[to] = h_p[frm], h_par[frm], h_node[frm]
    if h_o is not None:
        h_o[to] = h_o[frm]
