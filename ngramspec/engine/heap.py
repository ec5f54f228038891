"""The engine's one priority queue: libstdc++'s binary max-heap (``push_heap``/``pop_heap``).

PROB trees (the trie's, :mod:`ngramspec.engine.tree`, and the corpora's,
:mod:`ngramspec.engine.corpus_tree`) pop equal probabilities in the order SGLang's
``std::priority_queue`` does, so the heap moves exactly as libstdc++'s does (the readable model
is :class:`ngramspec.stdorder.StdPriorityQueue`).  ADAPTIVE (:mod:`ngramspec.engine.adaptive`)
breaks ties by push order, a key of its own: any correct heap pops its candidates in one order.

An entry is ``(p, o, par, node)`` in four parallel arrays: the priority ``p`` (float64), the
tie key ``o`` (larger pops later among equal ``p``; trees push 0, so only ``p`` decides, as in
SGLang), and two payload ints (the tree parent and the node the entry expands).
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
        if not (h_p[up] < p or (h_p[up] == p and h_o[up] > o)):
            break
        h_p[hole], h_o[hole], h_par[hole], h_node[hole] = h_p[up], h_o[up], h_par[up], h_node[up]
        hole = up
    h_p[hole], h_o[hole], h_par[hole], h_node[hole] = p, o, par, node


@jit
def heap_pop(h_p, h_o, h_par, h_node, size):
    """libstdc++ ``pop_heap`` on ``[0, size)``: the top ends at index ``size - 1`` (the caller
    reads it there, or at 0 before the call)."""
    last = size - 1
    vp, vo, vpar, vnode = h_p[last], h_o[last], h_par[last], h_node[last]
    h_p[last], h_o[last], h_par[last], h_node[last] = h_p[0], h_o[0], h_par[0], h_node[0]
    length = last
    hole = 0
    child = 0
    # __adjust_heap: the hole goes down to a leaf along the larger children, then the last
    # entry goes back up from there.
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if h_p[child] < h_p[child - 1] or (h_p[child] == h_p[child - 1]
                                           and h_o[child] > h_o[child - 1]):
            child -= 1
        h_p[hole], h_o[hole] = h_p[child], h_o[child]
        h_par[hole], h_node[hole] = h_par[child], h_node[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1) - 1
        h_p[hole], h_o[hole] = h_p[child], h_o[child]
        h_par[hole], h_node[hole] = h_par[child], h_node[child]
        hole = child
    heap_push(h_p, h_o, h_par, h_node, hole, vp, vo, vpar, vnode)
