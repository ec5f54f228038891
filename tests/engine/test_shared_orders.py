"""The engine's one heap and one libstdc++ map model, against the readable models of
:mod:`ngramspec.stdorder` (which ``tests/engine/test_stdorder.py`` checks against libstdc++ itself)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramspec.engine.heap import heap_pop, heap_push
from ngramspec.engine.tree import BUCKET_COUNTS, TREE_ROWS, _map_get, _map_insert, _tree_reset
from ngramspec.stdorder import StdPriorityQueue, UnorderedMapOrder

# Pushes (a small priority: many ties) and pops, as the trees use the heap.
OPS = st.lists(st.one_of(st.integers(0, 3), st.none()), max_size=60)


def _heap(cap: int):
    return (np.zeros(cap), np.zeros(cap, np.int64), np.zeros(cap, np.int32),
            np.zeros(cap, np.int32))


@settings(deadline=None, max_examples=200)
@given(OPS)
def test_heap_pops_ties_as_std_priority_queue(ops):
    """With the tie key 0 (the trees' use) equal priorities pop as libstdc++ pops them."""
    h_p, h_o, h_par, h_node = _heap(len(ops) + 1)
    model: StdPriorityQueue[int] = StdPriorityQueue()
    size = 0
    got, want = [], []
    for i, op in enumerate(ops):
        if op is not None:
            heap_push(h_p, h_o, h_par, h_node, size, op / 4, 0, -1, i)
            size += 1
            model.push(op / 4, i)
        elif size:
            heap_pop(h_p, h_o, h_par, h_node, size)
            size -= 1
            got.append((h_p[size], h_node[size]))
            want.append(model.pop())
    assert got == want


@settings(deadline=None, max_examples=200)
@given(st.lists(st.integers(0, 3), max_size=60))
def test_heap_with_tie_keys_pops_in_key_order(prios):
    """ADAPTIVE's use: distinct tie keys (push order) make the pop order (priority descending,
    key ascending), whatever the heap's moves."""
    h_p, h_o, h_par, h_node = _heap(len(prios) + 1)
    for i, p in enumerate(prios):
        heap_push(h_p, h_o, h_par, h_node, i, p / 4, i, -1, i)
    got = []
    for size in range(len(prios), 0, -1):
        got.append(int(h_node[0]))
        heap_pop(h_p, h_o, h_par, h_node, size)
    assert got == sorted(range(len(prios)), key=lambda i: (-prios[i], i))


@settings(deadline=None, max_examples=200)
@given(st.lists(st.integers(-2**31, 2**31 - 1) | st.integers(0, 40), max_size=40))
def test_tree_children_iterate_as_unordered_map(tokens):
    """The tree model's child list of the root is the libstdc++ map's iteration order
    (rehashes and negative tokens included); a token already there is found, not added."""
    n = len(tokens) + 1
    tree = np.zeros((TREE_ROWS, n), np.int32)
    order = np.zeros(n, np.int32)
    _tree_reset(tree)
    model = UnorderedMapOrder()
    cursor = 1
    for t in tokens:
        if _map_get(0, t, tree) == -1:
            _map_insert(0, cursor, t, tree, BUCKET_COUNTS, order)
            cursor += 1
        model[t] = 0
    got = []
    cur = tree[1, 0]
    while cur != -1:
        got.append(int(tree[0, cur]))
        cur = tree[2, cur]
    assert got == list(model)
    assert tree[4, 0] == model.bucket_count
