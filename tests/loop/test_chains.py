"""Trees cut to chains: the compiled cut (DraftBatch.chains) against the readable rule
(DraftBatch.chain_slots), on random trees with and without path probabilities."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns


@st.composite
def tree_batches(draw):
    b = draw(st.integers(1, 4))
    n = draw(st.integers(1, 9))
    with_probs = draw(st.booleans())
    tokens = np.zeros((b, n), np.int32)
    mask = np.zeros((b, n, n), bool)
    probs = np.zeros((b, n)) if with_probs else None
    num = np.zeros(b, np.int32)
    for r in range(b):
        k = draw(st.integers(0, n - 1))
        num[r] = k
        parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, k + 1)]
        parents += [0] * (n - 1 - k)  # padding: root children
        for i in range(n):
            mask[r, i, i] = True
            p = parents[i]
            while p >= 0:
                mask[r, i, p] = True
                p = parents[p]
        tokens[r, 0] = draw(st.integers(0, 50))
        tokens[r, 1:k + 1] = draw(st.lists(st.integers(0, 50), min_size=k, max_size=k))
        if with_probs:
            probs[r, 0] = 1.0
            for i in range(1, k + 1):
                # a path's probability never grows below it; ties are frequent on purpose
                probs[r, i] = probs[r, parents[i]] * draw(st.sampled_from([1.0, 0.5, 0.25]))
    return ns.DraftBatch(tokens, mask, num, probs)


@settings(max_examples=300, deadline=None)
@given(tree_batches())
def test_the_compiled_cut_follows_the_readable_rule(d):
    c = d.chains()
    for r, slots in enumerate(d.chain_slots()):
        m = slots.size
        assert c.num_drafts[r] == m
        assert_array_equal(c.tokens[r, :m + 1], np.concatenate([[d.tokens[r, 0]],
                                                                 d.tokens[r, slots]]))
        assert_array_equal(c.tokens[r, m + 1:], 0)
        assert_array_equal(c.parents[r], [-1] + list(range(m)) + [0] * (d.draft_token_num
                                                                         - 1 - m))
        if d.probs is not None:
            assert_array_equal(c.probs[r, 1:m + 1], d.probs[r, slots])
            assert_array_equal(c.probs[r, m + 1:], 0.0)
        else:
            assert c.probs is None
        # each chain slot is the child of the slot before it in the original tree
        path = [0, *slots.tolist()]
        assert all(d.parents[r, path[i + 1]] == path[i] for i in range(m))
