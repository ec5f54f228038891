"""Stateful matches write their drafts into rows of an output pool that the backend hands out
once each: a returned ``DraftBatch`` is never changed by later calls (across pool renewals, trie
growth and state growth), and pooled results equal those of the reference backend."""

from __future__ import annotations

import numpy as np
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.engine.backend import POOL_ROWS

CFG = dict(max_trie_depth=6, draft_token_num=6, capacity=5000)


def _serve(backend, match_type, batches):
    """Replay ``batches`` of (contexts, ids, lengths), inserting each; every DraftBatch kept."""
    cache = ns.NgramCache(**CFG, match_type=match_type, backend=backend)
    kept = []
    for ctxs, ids, lens in batches:
        d = cache.match(ctxs, request_ids=ids, total_lens=lens)
        kept.append((d, d.tokens.copy(), d.mask.copy(), d.num_drafts.copy()))
        cache.insert(ctxs)
    return kept


def _trace(seed, steps):
    rng = np.random.default_rng(seed)
    seqs = {}
    out = []
    for step in range(steps):
        b = int(rng.choice([1, 1, 3, 7, 40]))
        ids = [f"r{int(i)}" for i in rng.choice(60, size=b, replace=False)]
        ctxs, lens = [], []
        for rid in ids:
            seqs.setdefault(rid, []).extend(rng.integers(0, 6, size=3).tolist())
            s = seqs[rid]
            ctxs.append(np.asarray(s[-6:], np.int32))
            lens.append(len(s))
        out.append((ctxs, ids, lens))
    return out


def test_results_survive_later_calls_and_equal_the_reference():
    for match_type in ("BFS", "PROB"):
        batches = _trace(3, 3 * POOL_ROWS // 8)
        assert sum(len(b[0]) for b in batches) > 2 * POOL_ROWS  # several pools used
        mine = _serve("numba", match_type, batches)
        ref = _serve("reference", match_type, batches)
        for (d, tok, mask, num), (_, r_tok, r_mask, r_num) in zip(mine, ref):
            # What was returned then is what the batch holds now, after every later call.
            assert_array_equal(d.tokens, tok)
            assert_array_equal(d.mask, mask)
            assert_array_equal(d.num_drafts, num)
            assert_array_equal(tok, r_tok)
            assert_array_equal(mask, r_mask)
            assert_array_equal(num, r_num)


def test_stateless_and_batch_one_share_the_pool():
    cache = ns.NgramCache(**CFG)
    cache.insert([[1, 2, 3, 4, 5, 1, 2, 3, 6]])
    first = cache.match([np.array([1, 2], np.int32)], request_ids=["a"], total_lens=[2])
    second = cache.match([[2, 3], [1, 2]])  # stateless, batch 2
    third = cache.match([np.array([1, 2], np.int32)], request_ids=["a"], total_lens=[2])
    assert_array_equal(first.tokens, third.tokens)
    assert_array_equal(second.tokens[1], first.tokens[0])
    assert not np.shares_memory(first.tokens, third.tokens)
    assert first.tokens.shape == (1, 6) and second.mask.shape == (2, 6, 6)
    assert not first.tokens.flags.writeable


def test_batch_serving_form_equals_the_checked_forms():
    from ngramspec import _validate as v

    batches = _trace(5, 40)
    fast = ns.NgramCache(**CFG)
    slow = ns.NgramCache(**CFG)
    for ctxs, ids, lens in batches:
        if len(ctxs) > 1:
            assert v.serving_batch(ctxs, ids, lens) is not None
        a = fast.match(ctxs, request_ids=ids, total_lens=lens)
        b = slow.match(tuple(c.tolist() for c in ctxs), request_ids=tuple(ids),
                       total_lens=np.asarray(lens))
        assert_array_equal(a.tokens, b.tokens)
        assert_array_equal(a.mask, b.mask)
        assert_array_equal(a.num_drafts, b.num_drafts)
        fast.insert(ctxs)
        slow.insert(ctxs)
    a = np.array([1, 2], np.int32)
    for near_miss in (([a, a], ["x", "x"], [2, 2]),                  # duplicate ids
                      ([a, a[:0]], ["x", "y"], [2, 2]),              # an empty context
                      ([a, a], ["x", "y"], [2, 1]),                  # shorter than its context
                      ([a, a], ["x", True], [2, 2]),                 # a bool id
                      ([a, a], ["x", "y"], [2, True]),               # a bool length
                      ([a, a], ["x", "y"], [2, 2 ** 63]),            # beyond int64
                      ([a, a.astype(np.int64)], ["x", "y"], [2, 2]),  # another dtype
                      ([a, a.astype(bool)], ["x", "y"], [2, 2]),
                      ([a, a[None]], ["x", "y"], [2, 2]),            # a 2-D array
                      ([a, np.zeros((2, 1), np.int32)], ["x", "y"], [2, 2]),
                      ([a, np.arange(6, dtype=np.int32)[::2]], ["x", "y"], [2, 3])):  # strided
        assert v.serving_batch(*near_miss) is None


def test_a_pickled_batch_holds_its_rows_only():
    import pickle

    cache = ns.NgramCache(**CFG)
    cache.insert([[1, 2, 3, 4, 5, 1, 2, 3, 6]])
    d = cache.match([np.array([1, 2], np.int32)], request_ids=["a"], total_lens=[2])
    back = pickle.loads(pickle.dumps(d))
    assert_array_equal(back.tokens, d.tokens)
    assert_array_equal(back.mask, d.mask)
    assert_array_equal(back.num_drafts, d.num_drafts)
    assert "_pool" not in back.__dict__
    assert len(pickle.dumps(d)) < 2000  # not the pool's rows of other calls
