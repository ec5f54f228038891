"""Input handling of NgramCache: accepted forms, clear errors, and no change on a rejected call."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns


@pytest.fixture
def cache():
    c = ns.NgramCache(max_trie_depth=6, draft_token_num=6, capacity=1000)
    c.insert([[1, 2, 3, 4, 5], [1, 2, 3, 9]])
    return c


def snapshot(c):
    d = c.match([[1, 2, 3], [2, 3], [9]])
    return len(c), d.tokens.copy(), d.mask.copy()


def assert_unchanged(c, before):
    after = snapshot(c)
    assert after[0] == before[0]
    assert_array_equal(after[1], before[1])
    assert_array_equal(after[2], before[2])


def test_accepted_batch_forms_agree(cache):
    lists = cache.match([[1, 2, 3], [2, 3]])
    arr2d = cache.match(np.array([[1, 2, 3], [9, 2, 3]], dtype=np.int64))
    arrays = cache.match([np.array([1, 2, 3], dtype=np.int16), (2, 3)])
    assert_array_equal(lists.tokens, arrays.tokens)
    assert_array_equal(lists.tokens[0], arr2d.tokens[0])
    # Non-contiguous and read-only arrays are fine.
    base = np.array([[1, 0, 2, 0, 3]], dtype=np.int32)[:, ::2]
    base.setflags(write=False)
    assert_array_equal(cache.match(base).tokens, lists.tokens[:1])


def test_empty_sequence_insert_is_noop(cache):
    before = snapshot(cache)
    cache.insert([[]])
    cache.insert([])
    assert_unchanged(cache, before)


def test_outputs_types(cache):
    d = cache.match([[1, 2, 3]])
    assert d.tokens.dtype == np.int32 and d.tokens.shape == (1, 6)
    assert d.mask.dtype == np.bool_ and d.mask.shape == (1, 6, 6)
    assert d.num_drafts.dtype == np.int32


@pytest.mark.parametrize("call, exc, match", [
    (lambda c: c.insert([[1.5, 2]]), TypeError, r"sequences\[0\] must hold integer"),
    (lambda c: c.insert([np.array([1.0, 2.0])]), TypeError, "dtype float64"),
    (lambda c: c.insert([["a", "b"]]), TypeError, "integer token ids"),
    (lambda c: c.insert("abc"), TypeError, "list of 1-D"),
    (lambda c: c.insert(None), TypeError, "list of 1-D"),
    (lambda c: c.insert([1, 2, 3]), TypeError, "flat sequence"),
    (lambda c: c.insert([[[1, 2]]]), TypeError, "integer token ids"),
    (lambda c: c.insert(np.zeros((2, 2, 2), dtype=int)), ValueError, "2-D"),
    (lambda c: c.insert([[1, 2**31]]), ValueError, "outside int32"),
    (lambda c: c.insert([[1, 2], [True, 3]]), TypeError, "bool"),
    (lambda c: c.match([]), ValueError, "empty batch"),
    (lambda c: c.match([[1], []]), ValueError, r"contexts\[1\] is empty"),
    (lambda c: c.match([[1, -2**31 - 1]]), ValueError, "outside int32"),
    (lambda c: c.match([[1, 2]], request_ids=["a"]), ValueError, "total_lens is required"),
    (lambda c: c.match([[1, 2]], request_ids=["a", "b"], total_lens=[2, 2]), ValueError,
     "2 ids for 1 contexts"),
    (lambda c: c.match([[1, 2]], request_ids=["a"], total_lens=[2, 3]), ValueError,
     "2 values for 1 contexts"),
    (lambda c: c.match([[1, 2]], request_ids=["a"], total_lens=[1]), ValueError,
     "shorter than"),
    (lambda c: c.match([[1], [2]], request_ids=["a", "a"], total_lens=[5, 5]), ValueError,
     "duplicates"),
    (lambda c: c.match([[1]], request_ids=[1.5], total_lens=[5]), TypeError, "str or an int"),
    (lambda c: c.match([[1]], request_ids="a", total_lens=[5]), TypeError, "sequence"),
    (lambda c: c.match([[1]], request_ids=["a"], total_lens=[2.5]), TypeError, "integer"),
    (lambda c: c.erase("abc"), TypeError, "sequence"),
])
def test_bad_input_is_rejected_and_cache_unchanged(cache, call, exc, match):
    cache.match([[1, 2, 3]], request_ids=["a"], total_lens=[10])
    before = snapshot(cache)
    state_before = cache.match([[1, 2, 3]], request_ids=["a"], total_lens=[10]).tokens.copy()
    with pytest.raises(exc, match=match):
        call(cache)
    assert_unchanged(cache, before)
    assert_array_equal(cache.match([[1, 2, 3]], request_ids=["a"], total_lens=[10]).tokens,
                       state_before)


def test_negative_ids_and_int_request_ids(cache):
    cache.insert([[-5, -7, 3, -7, -9]])
    d = cache.match([[-5, -7]], request_ids=[7], total_lens=[2])
    assert d.tokens[0, 0] == -7 and -9 in d.tokens[0] and 3 in d.tokens[0]
    cache.erase([7, "unknown"])  # unknown ids are a no-op


def test_reset_clears_trie_and_states(cache):
    cache.match([[1, 2]], request_ids=["r"], total_lens=[2])
    cache.reset()
    assert len(cache) == 1
    assert_array_equal(cache.match([[1, 2]], request_ids=["r"], total_lens=[3]).tokens,
                       [[2, 0, 0, 0, 0, 0]])


def test_batch_equals_single_requests(cache):
    ctxs = [[1, 2, 3], [2, 3], [9], [4, 5]]
    whole = cache.match(ctxs)
    for b, ctx in enumerate(ctxs):
        one = cache.match([ctx])
        assert_array_equal(whole.tokens[b], one.tokens[0])
        assert_array_equal(whole.mask[b], one.mask[0])


def test_backend_choice():
    assert ns.NgramCache(capacity=100).backend == "numba"
    assert ns.NgramCache(capacity=100, backend="reference").backend == "reference"
    with pytest.raises(ValueError, match="backend must be one of"):
        ns.NgramCache(capacity=100, backend="gpu")


def test_total_lens_beyond_int32_are_fine(cache):
    d = cache.match([[1, 2, 3]], request_ids=["long"], total_lens=np.array([2**40]))
    assert_array_equal(d.tokens, cache.match([[1, 2, 3]]).tokens)
    with pytest.raises(TypeError, match="total_lens"):
        cache.match([[1, 2, 3]], request_ids=["x"], total_lens=[[3]])
    with pytest.raises(TypeError, match="total_lens"):
        cache.match([[1, 2, 3]], request_ids=["x"], total_lens=3)


def test_every_cheap_form_gives_the_same_drafts(cache):
    ctxs = [[1, 2, 3], [9, 2, 3], [2, 3]]
    want = cache.match(ctxs, request_ids=["x", "y", 4], total_lens=[3, 8, 2])
    forms = [
        [np.asarray(c, np.int32) for c in ctxs],            # what a server holds
        [np.asarray(c, np.int64) for c in ctxs],
        tuple(np.asarray(c, np.int32) for c in ctxs),
        [tuple(c) for c in ctxs],
    ]
    for i, form in enumerate(forms):
        twin = ns.NgramCache(max_trie_depth=6, draft_token_num=6, capacity=1000)
        twin.insert([[1, 2, 3, 4, 5], [1, 2, 3, 9]])
        ids = ["x", "y", 4] if i % 2 else ("x", "y", np.int64(4))
        got = twin.match(form, request_ids=ids,
                         total_lens=np.array([3, 8, 2], np.int64 if i % 2 else np.int32))
        assert_array_equal(got.tokens, want.tokens)
        assert_array_equal(got.mask, want.mask)
    square = np.array([[1, 2, 3], [9, 2, 3]], np.int64)
    assert_array_equal(cache.match(square).tokens, cache.match(square.tolist()).tokens)


def test_int32_contexts_are_not_copied_and_stay_untouched(cache):
    ctx = np.array([1, 2, 3], np.int32)
    from ngramspec import _validate

    assert _validate.as_contexts([ctx])[0] is ctx
    cache.match([ctx], request_ids=["z"], total_lens=[3])
    assert_array_equal(ctx, [1, 2, 3]) and ctx.flags.writeable


def test_draft_batch_is_lazy(cache):
    d = cache.match([[1, 2, 3]])
    derived = ("parents", "depth", "retrieve_index", "retrieve_next_token",
               "retrieve_next_sibling")
    assert not any(name in vars(d) for name in derived)  # nothing computed yet
    parents = d.parents
    assert "parents" in vars(d) and d.parents is parents  # computed once, on first use
    assert not parents.flags.writeable
    assert not any(name in vars(d) for name in derived if name != "parents")


def test_wide_rows_out_of_range_name_the_row(cache):
    before = snapshot(cache)
    rows = [np.array([1, 2], np.int64), np.array([3, 2**40], np.int64)]
    with pytest.raises(ValueError, match=r"contexts\[1\] holds token ids outside int32"):
        cache.match(rows)
    with pytest.raises(ValueError, match=r"sequences\[1\] holds token ids outside int32"):
        cache.insert(np.array([[1, 2], [3, 2**40]]))
    assert_unchanged(cache, before)


def test_every_config_field_is_a_cache_keyword():
    """NgramCache(**options) and NgramCache(config=NgramConfig(**options)) agree, option by
    option: no setting is reachable only through config=."""
    import dataclasses
    import inspect

    from ngramspec import NgramCache, NgramConfig

    params = inspect.signature(NgramCache.__init__).parameters
    missing = [f.name for f in dataclasses.fields(NgramConfig) if f.name not in params]
    assert missing == []
    options = dict(match_type="ADAPTIVE", shared_pseudo_count=2.0, min_token_prob=0.3,
                   capacity=1000)
    assert NgramCache(**options).config == NgramConfig(**options)
