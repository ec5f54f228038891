"""The batch-1 serving call (``[int32 array]``, ``[id]``, ``[int length]``) is checked in one pass
(``_validate.as_serving_one``): it drafts exactly what every other accepted form of the same
call drafts, and every near miss takes the full checks, with their errors, the cache unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec import _validate as v
from helpers import canonical as _canonical

CFG = dict(max_trie_depth=6, draft_token_num=6, capacity=60)
SEQS = [[1, 2, 3, 4, 5], [1, 2, 3, 9], [7, 7, 7, 7, 7, 7, 7, 7], [2, 3, 4, 8, 1, 2]]


def make(match_type="BFS"):
    c = ns.NgramCache(**CFG, match_type=match_type)
    c.insert(SEQS)
    return c


def forms(ctx, rid, total):
    """The same batch-1 call in the fast form and in forms that take the full checks."""
    a = np.asarray(ctx, np.int32)
    return [([a], [rid], [total]),                          # fast
            ((a,), (rid,), (total,)),                       # tuples
            ([list(ctx)], [rid], [total]),                  # a list of ints
            ([a.astype(np.int64)], [rid], np.array([total])),  # int64 array, array of lengths
            (a[None, :], np.array([rid]), [total])]         # a 2-D array, an array of ids


def test_fast_form_is_recognised():
    a = np.array([1, 2], np.int32)
    got = v.as_serving_one([a], ["r"], [5])
    assert got is not None and got[0][0] is a and got[1] == ["r"]
    assert got[2].dtype == np.int64 and got[2].tolist() == [5]
    for near_miss in (([a], ["r"], [1]),                   # shorter than the context
                      ([a], [True], [5]),                  # a bool is not an id
                      ([a], ["r"], [True]),                # nor a length
                      ([a], ["r"], [2 ** 63]),             # beyond int64
                      ([a[:0]], ["r"], [5]),               # empty context
                      ([a.astype(np.int64)], ["r"], [5]),  # not int32
                      ([a, a], ["r", "s"], [5, 5]),        # batch 2
                      ([a], ["r"], None)):
        assert v.as_serving_one(*near_miss) is None


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_fast_form_drafts_like_every_other_form(match_type):
    steps = [([1, 2, 3], "a", 3), ([2, 3, 4], "a", 4), ([7, 7], 5, 9), ([3, 4, 8, 1], "a", 6),
             ([4, 8, 1, 2], "a", 7), ([7, 7, 7], 5, 10)]
    caches = [make(match_type) for _ in forms(*steps[0])]
    for ctx, rid, total in steps:
        outs = [c.match(*f) for c, f in zip(caches, forms(ctx, rid, total))]
        for d in outs[1:]:
            assert_array_equal(d.tokens, outs[0].tokens)
            assert_array_equal(d.mask, outs[0].mask)
            assert_array_equal(d.num_drafts, outs[0].num_drafts)
        for c in caches:
            c.insert([ctx])


@pytest.mark.parametrize("call, exc, match", [
    (([np.array([1, 2, 3], np.int32)], ["a"], [2]), ValueError, r"total_lens\[0\] = 2"),
    (([np.array([1, 2, 3], np.int32)], [True], [3]), TypeError, r"request_ids\[0\]"),
    (([np.array([], np.int32)], ["a"], [3]), ValueError, r"contexts\[0\] is empty"),
    (([np.array([1, 2], np.int32)], ["a"], [2.0]), TypeError, r"total_lens\[0\]"),
    (([np.array([1, 2], np.int32)], ["a"], None), ValueError, "total_lens is required"),
])
def test_near_misses_get_the_full_checks_and_leave_the_cache(call, exc, match):
    c = make()
    c.match([np.array([1, 2, 3], np.int32)], ["a"], [3])
    before = _canonical(c)
    with pytest.raises(exc, match=match):
        c.match(*call)
    after = _canonical(c)
    assert before[0] == after[0] and before[2] == after[2]
    for name in before[1]:
        assert_array_equal(before[1][name], after[1][name], err_msg=name)
