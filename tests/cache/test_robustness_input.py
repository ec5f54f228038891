"""Bad input through every public entry point of NgramConfig and NgramCache: a specific error
naming the argument, and the cache exactly as it was (its whole canonical content, match states
included); odd but valid inputs (read-only, strided, big-endian, huge batches) accepted."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import canonical as _canonical

BACKENDS = ["numba", "reference"]
CFG = dict(max_trie_depth=6, draft_token_num=6, capacity=40)


def make(backend):
    c = ns.NgramCache(**CFG, backend=backend)
    c.insert([[1, 2, 3, 4, 5], [1, 2, 3, 9], [7, 7, 7, 7, 7, 7, 7, 7]])
    c.match([[1, 2, 3]], request_ids=["a"], total_lens=[10])
    c.match([[7, 7]], request_ids=[5], total_lens=[2])
    return c


def snapshot(c):
    epoch, arrays, keys = _canonical(c)
    return epoch, {k: v.copy() for k, v in arrays.items()}, list(keys)


def assert_same_snapshot(a, b):
    assert a[0] == b[0] and a[2] == b[2]
    for name in a[1]:
        assert_array_equal(a[1][name], b[1][name], err_msg=name)


BAD = [
    # insert: wrong types, nesting, ids outside int32
    ("insert([[1.5, 2]])", lambda c: c.insert([[1.5, 2]]), TypeError, r"sequences\[0\].*integer"),
    ("insert([array float])", lambda c: c.insert([np.array([1.0, 2.0])]), TypeError, "float64"),
    ("insert([['a']])", lambda c: c.insert([["a", "b"]]), TypeError, r"sequences\[0\]"),
    ("insert('abc')", lambda c: c.insert("abc"), TypeError, "sequences must be a list"),
    ("insert(None)", lambda c: c.insert(None), TypeError, "sequences must be a list"),
    ("insert([None])", lambda c: c.insert([None]), TypeError, r"sequences\[0\]"),
    ("insert([[None]])", lambda c: c.insert([[None]]), TypeError, r"sequences\[0\].*NoneType"),
    ("insert(flat)", lambda c: c.insert([1, 2, 3]), TypeError, "flat sequence"),
    ("insert(3 deep)", lambda c: c.insert([[[1, 2]]]), TypeError, r"sequences\[0\].*list"),
    ("insert(3-D array)", lambda c: c.insert(np.zeros((2, 2, 2), int)), ValueError, "2-D"),
    ("insert([2-D array])", lambda c: c.insert([np.zeros((2, 2), int)]), ValueError,
     r"sequences\[0\].*nesting deeper"),
    ("insert(1-D array)", lambda c: c.insert(np.arange(3)), ValueError, "wrap it"),
    ("insert([0-d array])", lambda c: c.insert([np.array(5)]), ValueError, r"shape \(\)"),
    ("insert(2**31)", lambda c: c.insert([[1, 2**31]]), ValueError, "outside int32"),
    ("insert(2**63)", lambda c: c.insert([[2**63]]), ValueError, "outside int32"),
    ("insert(-2**70)", lambda c: c.insert([[1, -2**70]]), ValueError, "outside int32"),
    ("insert(uint64 2**63)", lambda c: c.insert([np.array([2**63], np.uint64)]), ValueError,
     "outside int32"),
    ("insert(bool)", lambda c: c.insert([[1, 2], [True, 3]]), TypeError, "bool"),
    ("insert(bool array)", lambda c: c.insert([np.ones(2, bool)]), TypeError, "dtype bool"),
    ("insert(dict)", lambda c: c.insert([{1: 2}]), TypeError, r"sequences\[0\].*dict"),
    ("insert(set)", lambda c: c.insert([{1, 2}]), TypeError, r"sequences\[0\].*set"),
    ("insert(generator)", lambda c: c.insert([(i for i in range(3))]), TypeError, "generator"),
    ("insert(object array)", lambda c: c.insert(np.array([[1, 2]], dtype=object)), TypeError,
     "dtype object"),
    ("insert(wait='no')", lambda c: c.insert([[1]], wait="no"), TypeError, "wait must be a bool"),
    # match: empty batches and contexts, ids, lengths
    ("match([])", lambda c: c.match([]), ValueError, "empty batch"),
    ("match((0, 3) array)", lambda c: c.match(np.zeros((0, 3), int)), ValueError, "empty batch"),
    ("match([[1], []])", lambda c: c.match([[1], []]), ValueError, r"contexts\[1\] is empty"),
    ("match((2, 0) array)", lambda c: c.match(np.zeros((2, 0), int)), ValueError,
     r"contexts\[0\] is empty"),
    ("match(-2**31-1)", lambda c: c.match([[1, -2**31 - 1]]), ValueError, "outside int32"),
    ("match(float 2-D)", lambda c: c.match(np.ones((1, 2))), TypeError, "contexts.*float64"),
    ("match(ids, no lens)", lambda c: c.match([[1, 2]], request_ids=["a"]), ValueError,
     "total_lens is required"),
    ("match(2 ids, 1 ctx)", lambda c: c.match([[1, 2]], request_ids=["a", "b"],
                                              total_lens=[2, 2]), ValueError, "2 ids for 1"),
    ("match(2 lens, 1 ctx)", lambda c: c.match([[1, 2]], request_ids=["a"], total_lens=[2, 3]),
     ValueError, "total_lens has 2 values for 1"),
    ("match(len < ctx)", lambda c: c.match([[1, 2]], request_ids=["a"], total_lens=[1]),
     ValueError, r"total_lens\[0\] = 1 is shorter"),
    ("match(negative len)", lambda c: c.match([[1]], request_ids=["a"], total_lens=[-4]),
     ValueError, "shorter"),
    ("match(duplicate ids)", lambda c: c.match([[1], [2]], request_ids=["a", "a"],
                                               total_lens=[5, 5]), ValueError, "duplicates"),
    ("match(dup 1 vs np.int64(1))", lambda c: c.match([[1], [2]], request_ids=[1, np.int64(1)],
                                                      total_lens=[5, 5]), ValueError, "duplicates"),
    ("match(float id)", lambda c: c.match([[1]], request_ids=[1.5], total_lens=[5]), TypeError,
     r"request_ids\[0\] must be a str or an int"),
    ("match(None id)", lambda c: c.match([[1]], request_ids=[None], total_lens=[5]), TypeError,
     r"request_ids\[0\]"),
    ("match(bool id)", lambda c: c.match([[1]], request_ids=[True], total_lens=[5]), TypeError,
     r"request_ids\[0\]"),
    ("match(ids='a')", lambda c: c.match([[1]], request_ids="a", total_lens=[5]), TypeError,
     "request_ids must be"),
    ("match(ids 0-d)", lambda c: c.match([[1]], request_ids=np.array(1), total_lens=[5]),
     TypeError, "request_ids must be"),
    ("match(ids dict)", lambda c: c.match([[1]], request_ids={"a": 1}, total_lens=[5]),
     TypeError, "request_ids must be"),
    ("match(len float)", lambda c: c.match([[1]], request_ids=["a"], total_lens=[2.5]),
     TypeError, r"total_lens\[0\] must be an integer"),
    ("match(len None)", lambda c: c.match([[1]], request_ids=["a"], total_lens=[None]),
     TypeError, r"total_lens\[0\]"),
    ("match(len bool)", lambda c: c.match([[1]], request_ids=["a"], total_lens=[True]),
     TypeError, r"total_lens\[0\]"),
    ("match(len 2**70)", lambda c: c.match([[1]], request_ids=["a"], total_lens=[2**70]),
     ValueError, "int64"),
    ("match(len uint64 max)", lambda c: c.match([[1]], request_ids=["a"],
                                                total_lens=np.array([2**64 - 1], np.uint64)),
     ValueError, "int64"),
    ("match(lens 2-D)", lambda c: c.match([[1]], request_ids=["a"], total_lens=[[1]]),
     TypeError, "total_lens"),
    ("match(lens int)", lambda c: c.match([[1]], request_ids=["a"], total_lens=3), TypeError,
     "total_lens must be"),
    ("match(lens set)", lambda c: c.match([[1]], request_ids=["a"], total_lens={3}), TypeError,
     "total_lens must be"),
    ("match(lens junk, no ids)", lambda c: c.match([[1]], total_lens=["x"]), TypeError,
     r"total_lens\[0\]"),
    # erase
    ("erase('abc')", lambda c: c.erase("abc"), TypeError, "request_ids must be"),
    ("erase(None)", lambda c: c.erase(None), TypeError, "request_ids must be"),
    ("erase(7)", lambda c: c.erase(7), TypeError, "request_ids must be"),
    ("erase(0-d)", lambda c: c.erase(np.array(1)), TypeError, "request_ids must be"),
    ("erase([None])", lambda c: c.erase(["a", None]), TypeError, r"request_ids\[1\]"),
    ("erase(set)", lambda c: c.erase({"a"}), TypeError, "request_ids must be"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, call, exc, message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_rejected_cache_unchanged(backend, name, call, exc, message):
    cache, twin = make(backend), make(backend)
    before = snapshot(cache)
    with pytest.raises(exc, match=message):
        call(cache)
    assert_same_snapshot(before, snapshot(cache))
    # And it goes on exactly as an untouched twin (stateful matches included).
    for c in (cache, twin):
        c.insert([[3, 4, 5, 6]])
    for ctx, rid, total in (([1, 2, 3, 4], "a", 11), ([7, 7, 7], 5, 3), ([3, 4], "n", 2)):
        assert_array_equal(cache.match([ctx], request_ids=[rid], total_lens=[total]).tokens,
                           twin.match([ctx], request_ids=[rid], total_lens=[total]).tokens)


def test_config_bad_input():
    for kwargs, exc, message in [
        (dict(capacity=1e6), TypeError, "capacity must be an integer"),
        (dict(capacity="100"), TypeError, "capacity"),
        (dict(max_trie_depth="18"), TypeError, "max_trie_depth"),
        (dict(max_bfs_breadth=True), TypeError, "bool"),
        (dict(match_type=None), TypeError, "match_type"),
        (dict(match_type="bfs"), ValueError, "match_type"),
        (dict(profile=None), ValueError, "profile"),
        (dict(capacity=18), ValueError, "capacity must be greater"),
        (dict(capacity=2**40), ValueError, "int32"),
        (dict(draft_token_num=0), ValueError, "draft_token_num"),
        (dict(min_bfs_breadth=3, max_bfs_breadth=2), ValueError, "min_bfs_breadth"),
    ]:
        with pytest.raises(exc, match=message):
            ns.NgramConfig(**kwargs)
    with pytest.raises(TypeError, match="config must be an NgramConfig"):
        ns.NgramCache(config={"capacity": 100})
    with pytest.raises(ValueError, match="backend must be one of"):
        ns.NgramCache(capacity=100, backend=None)
    with pytest.raises(TypeError, match="positional"):
        ns.NgramCache(100)  # options are keyword-only
    with pytest.raises(TypeError, match="mapping"):
        ns.NgramConfig.from_sglang_args([("capacity", 10)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_odd_but_valid_arrays_are_accepted(backend):
    cache, twin = make(backend), make(backend)
    plain = [[1, 2, 3, 4, 5, 6], [2, 3, 9]]
    strided = np.array([[1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0]], np.int64)[:, ::2]
    readonly = np.array([2, 3, 9], np.int32)
    readonly.setflags(write=False)
    cache.insert([strided[0], readonly])
    cache.insert(np.asfortranarray(np.array([[5, 6, 7], [6, 7, 1]], np.int16)))
    cache.insert([np.array([4, 4, 5], dtype=">i8"), range(3, 6), (7, 8)])
    twin.insert(plain)
    twin.insert([[5, 6, 7], [6, 7, 1]])
    twin.insert([[4, 4, 5], [3, 4, 5], [7, 8]])
    assert_same_snapshot(snapshot(cache), snapshot(twin))
    ctx = np.array([[9, 1, 9, 2, 9, 3]], np.uint8)[:, 1::2]
    assert_array_equal(cache.match(ctx).tokens, twin.match([[1, 2, 3]]).tokens)
    # Empty sequences in insert stay a no-op, as in SGLang.
    before = snapshot(cache)
    cache.insert([[], np.zeros(0, np.int64)])
    cache.insert([])
    assert_same_snapshot(before, snapshot(cache))


@pytest.mark.parametrize("backend", BACKENDS)
def test_total_len_going_backwards_rebuilds_the_state(backend):
    cache = ns.NgramCache(**CFG, backend=backend)
    cache.match([[5, 6]], request_ids=["a"], total_lens=[2])  # empty trie: suffixes absent
    cache.insert([[5, 6, 7]])
    # Same length: the state advances by nothing, and an absent suffix stays absent (SGLang).
    assert cache.match([[5, 6]], request_ids=["a"], total_lens=[2]).num_drafts[0] == 0
    # Backwards: rebuilt from the context, as SGLang does, so it now equals stateless matching.
    back = cache.match([[6]], request_ids=["a"], total_lens=[1])
    assert_array_equal(back.tokens, cache.match([[6]]).tokens)
    assert back.num_drafts[0] == 1 and back.tokens[0, 1] == 7


def test_enormous_batches():
    cache = ns.NgramCache(**CFG)
    rng = np.random.default_rng(1)
    seqs = rng.integers(0, 30, size=(20_000, 8))
    cache.insert(seqs)
    assert len(cache) <= CFG["capacity"]
    ctxs = rng.integers(0, 30, size=(50_000, 3))
    whole = cache.match(ctxs)
    parts = [cache.match(ctxs[i:i + 10_000]) for i in range(0, 50_000, 10_000)]
    assert_array_equal(whole.tokens, np.concatenate([p.tokens for p in parts]))
    assert_array_equal(whole.mask, np.concatenate([p.mask for p in parts]))
    ids = np.arange(50_000)
    stateful = cache.match(ctxs, request_ids=ids, total_lens=np.full(50_000, 3))
    assert_array_equal(stateful.tokens, whole.tokens)
    cache.erase(ids)
    cache.check_integrity()


# Random junk through every entry point: a clear exception and no change, or the same result
# as the other backend.

_scalars = st.one_of(st.integers(-3, 5), st.integers(), st.floats(allow_nan=True), st.text(
    max_size=3), st.none(), st.booleans(), st.binary(max_size=2),
    st.sampled_from([2**31, -2**31 - 1, 2**63, 2**64, np.int64(3), np.uint64(2**63),
                     np.float32(1.0), math.inf]))


def _arrays():
    def make(t):
        dtype, shape, value = t
        if dtype is object:
            return np.array(shape, dtype=object)
        if np.dtype(dtype).kind in "iub":
            info = np.iinfo(dtype) if np.dtype(dtype).kind != "b" else None
            # Values the dtype can hold (NumPy 2 refuses out-of-range Python ints).
            value = value % 7 if info is None or info.bits == 8 else \
                min(max(value, int(info.min)), int(info.max))
        return np.full(tuple(shape), value, dtype=dtype)

    return st.tuples(st.sampled_from([np.int8, np.int32, np.int64, np.uint32, np.uint64,
                                      np.float64, np.bool_, object]),
                     st.lists(st.integers(0, 3), min_size=0, max_size=3),
                     st.integers(-3, 2**33)).map(make)


junk = st.recursive(st.one_of(_scalars, _arrays()),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.tuples(inner, inner),
                                            st.sets(st.integers(0, 5), max_size=3),
                                            st.dictionaries(st.integers(0, 3), inner,
                                                            max_size=2)),
                    max_leaves=8)
maybe_junk = st.one_of(st.none(), junk)


def _call(cache, op, args):
    if op == "insert":
        return cache.insert(args[0])
    if op == "match":
        d = cache.match(args[0], request_ids=args[1], total_lens=args[2])
        return d.tokens, d.mask, d.num_drafts
    if op == "erase":
        return cache.erase(args[0])
    return ns.NgramCache(**args[0], backend=cache.backend)


@given(op=st.sampled_from(["insert", "match", "erase", "config"]), data=st.data())
@settings(max_examples=150, deadline=None)
def test_random_junk_clear_error_or_correct_result(op, data):
    if op == "config":
        field = data.draw(st.sampled_from(["max_trie_depth", "min_bfs_breadth",
                                           "max_bfs_breadth", "draft_token_num", "match_type",
                                           "capacity", "profile", "config", "branch_length"]))
        args = ({field: data.draw(junk)},)
    elif op == "match":
        args = (data.draw(junk), data.draw(maybe_junk), data.draw(maybe_junk))
    else:
        args = (data.draw(junk),)
    caches = [make(b) for b in BACKENDS]
    before = [snapshot(c) for c in caches]
    outcomes = []
    for cache, snap in zip(caches, before):
        try:
            outcomes.append(("ok", _call(cache, op, args)))
        except (TypeError, ValueError) as e:
            assert str(e), "an error must say what is wrong"
            outcomes.append(("error", type(e)))
            assert_same_snapshot(snap, snapshot(cache))
    assert outcomes[0][0] == outcomes[1][0], outcomes
    if outcomes[0][0] == "error":
        assert outcomes[0][1] is outcomes[1][1]
    elif op == "match":
        for x, y in zip(outcomes[0][1], outcomes[1][1]):
            assert_array_equal(x, y)
    for cache in caches:
        cache.check_integrity()
    assert_same_snapshot(snapshot(caches[0]), snapshot(caches[1]))


# Beyond the cache: Drafter, DraftBatch, verification and simulate take the same checks.

def _drafter(backend="numba"):
    d = ns.Drafter(config=ns.NgramConfig(**CFG), backend=backend)
    d.add_request("a", [1, 2, 3, 4, 1, 2], 3)
    d.add_request(7, [5, 6], 1)
    return d


def _drafts():
    c = make("numba")
    return c.match([[1, 2, 3], [7, 7]])


BAD_DRAFTER = [
    ("Drafter(config=dict)", lambda d: ns.Drafter(config={"capacity": 40}), TypeError,
     "config must be an NgramConfig"),
    ("Drafter(backend=gpu)", lambda d: ns.Drafter(backend="gpu"), ValueError,
     "backend must be one of"),
    ("Drafter(cache=dict)", lambda d: ns.Drafter(cache={}), TypeError, "cache must be"),
    ("add_request(rid None)", lambda d: d.add_request(None, [1], 2), TypeError, "rid"),
    ("add_request(rid bool)", lambda d: d.add_request(True, [1], 2), TypeError, "rid"),
    ("add_request(prompt 2-D)", lambda d: d.add_request("n", np.ones((2, 2), int), 2),
     ValueError, "prompt_ids must be a 1-D"),
    ("add_request(prompt float)", lambda d: d.add_request("n", np.ones(2), 2), TypeError,
     "prompt_ids.*float64"),
    ("add_request(prompt str)", lambda d: d.add_request("n", "abc", 2), TypeError,
     "prompt_ids"),
    ("add_request(first float)", lambda d: d.add_request("n", [1], 2.5), TypeError,
     "first_token"),
    ("add_request(first list)", lambda d: d.add_request("n", [1], [2]), TypeError,
     "first_token"),
    ("add_request(first None)", lambda d: d.add_request("n", [1], None), TypeError,
     "first_token"),
    ("add_request(first -2**40)", lambda d: d.add_request("n", [1], -2**40), ValueError,
     r"first_token = -1099511627776 is a negative token id; token ids must be >= 0"),
    ("add_request(first 2**40)", lambda d: d.add_request("n", [1], 2**40), ValueError,
     "int32"),
    ("add_request(prompt -1)", lambda d: d.add_request("n", [3, -1], 2), ValueError,
     r"prompt_ids\[1\] = -1 is a negative token id"),
    ("propose(None)", lambda d: d.propose(None), TypeError, "rids must be a sequence"),
    ("propose([float])", lambda d: d.propose([1.5]), TypeError, r"rids\[0\]"),
    ("propose(dup)", lambda d: d.propose(["a", "a"]), ValueError,
     r"duplicate request id 'a' in rids \(rids\[0\] and rids\[1\]\)"),
    ("accept(bad tokens)", lambda d: (d.propose(["a"]), d.accept({"a": [1.5]})), TypeError,
     r"emitted\['a'\]"),
    ("accept(bad key)", lambda d: (d.propose(["a"]), d.accept({None: [1]})), TypeError,
     "emitted key"),
    ("accept(2**31)", lambda d: (d.propose(["a"]), d.accept({"a": [2**31]})), ValueError,
     "int32"),
    ("accept(-1)", lambda d: (d.propose(["a"]), d.accept({"a": [-1]})), ValueError,
     r"emitted\['a'\]\[0\] = -1 is a negative token id"),
    ("total_len(unknown)", lambda d: d.total_len("zz"), KeyError, "unknown request"),
    ("finish(float)", lambda d: d.finish(2.5), TypeError, "rid"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, call, exc, message", BAD_DRAFTER, ids=[b[0] for b in BAD_DRAFTER])
def test_drafter_bad_input_rejected_state_unchanged(backend, name, call, exc, message):
    drafter, twin = _drafter(backend), _drafter(backend)
    requests, pending = drafter.requests, drafter.pending
    before = snapshot(drafter.cache)
    with pytest.raises(exc, match=message):
        call(drafter)
    if not name.startswith("accept"):  # accept's calls propose first, on purpose
        assert drafter.requests == requests and drafter.pending == pending
        assert_same_snapshot(before, snapshot(drafter.cache))
        # And it goes on exactly as an untouched twin.
        for d in (drafter, twin):
            d.accept({rid: [4, 1] for rid in d.pending}) if d.pending else None
        got, want = drafter.propose(["a", 7]), twin.propose(["a", 7])
        assert_array_equal(got.tokens, want.tokens)


BAD_DRAFTS = [
    ("positions(negative)", lambda d: d.positions([3, -1]), ValueError,
     r"kv_lens\[1\] = -1; lengths must be >= 0"),
    ("positions(1 for 2)", lambda d: d.positions([3]), ValueError, "kv_lens has 1 values for 2"),
    ("positions(float)", lambda d: d.positions([1.5, 2]), TypeError, r"kv_lens\[0\]"),
    ("positions(str)", lambda d: d.positions("ab"), TypeError, "kv_lens must be"),
    ("positions(None)", lambda d: d.positions(), TypeError, "missing required argument"),
    ("positions(2-D)", lambda d: d.positions(np.ones((2, 1), int)), TypeError, "kv_lens"),
    ("positions(bool)", lambda d: d.positions([True, False]), TypeError, r"kv_lens\[0\]"),
    ("positions(2**70)", lambda d: d.positions([2**70, 1]), ValueError, "int64"),
    ("positions(both names)", lambda d: d.positions([1, 2], seq_lens=[1, 2]), TypeError,
     "only once"),
    ("attention_mask(negative)", lambda d: d.attention_mask(np.array([-5, 2])), ValueError,
     r"kv_lens\[0\] = -5"),
    ("attention_mask(float array)", lambda d: d.attention_mask(np.ones(2)), TypeError,
     "kv_lens.*float64"),
    ("additive_attention_mask(negative)", lambda d: d.additive_attention_mask([0, -1]),
     ValueError, "kv_lens"),
    ("additive_attention_mask(int dtype)",
     lambda d: d.additive_attention_mask([1, 2], dtype=np.int32), TypeError, "floating dtype"),
    ("additive_attention_mask(junk dtype)",
     lambda d: d.additive_attention_mask([1, 2], dtype=object()), TypeError, "floating dtype"),
    ("custom_mask(negative)", lambda d: d.custom_mask([-1, 0]), ValueError, "kv_lens"),
    ("custom_mask(3 for 2)", lambda d: d.custom_mask([1, 2, 3]), ValueError, "3 values for 2"),
    ("DraftBatch(1-D tokens)", lambda d: ns.DraftBatch(np.arange(3), d.mask, d.num_drafts),
     ValueError, "tokens must be a"),
    ("DraftBatch(float tokens)", lambda d: ns.DraftBatch(d.tokens * 1.0, d.mask, d.num_drafts),
     ValueError, "tokens must be a.*float64"),
    ("DraftBatch(mask shape)", lambda d: ns.DraftBatch(d.tokens, d.mask[:, :2], d.num_drafts),
     ValueError, "mask must be"),
    ("DraftBatch(mask 0/1/2)", lambda d: ns.DraftBatch(d.tokens, d.mask * 2, d.num_drafts),
     ValueError, "mask must be"),
    ("DraftBatch(num too big)", lambda d: ns.DraftBatch(d.tokens, d.mask, d.num_drafts + 9),
     ValueError, "num_drafts must be within"),
    ("DraftBatch(num shape)", lambda d: ns.DraftBatch(d.tokens, d.mask, [1]), ValueError,
     "num_drafts must be 2 integers"),
    ("DraftBatch(probs int)", lambda d: ns.DraftBatch(d.tokens, d.mask, d.num_drafts,
                                                     np.ones(d.tokens.shape, int)),
     ValueError, "probs must be None or a float"),
    ("expected_accept_lens", lambda d: d.expected_accept_lens, ValueError, "ADAPTIVE"),
    ("verify_greedy(not drafts)", lambda d: ns.verify_greedy(d.tokens, d.tokens), TypeError,
     "drafts must be a DraftBatch"),
    ("verify_greedy(shape)", lambda d: ns.verify_greedy(d, d.tokens[:1]), ValueError,
     r"target_predict must have shape .* = \(2, 6\)"),
    ("verify_greedy(float)", lambda d: ns.verify_greedy(d, d.tokens * 1.5), TypeError,
     "target_predict must hold integer"),
    ("verify_greedy(2**40)", lambda d: ns.verify_greedy(d, np.full(d.tokens.shape, 2**40)),
     ValueError, "target_predict holds token ids outside int32"),
    ("verify_greedy(str)", lambda d: ns.verify_greedy(d, "ab"), ValueError, "target_predict"),
    ("verify_greedy_logits(V=0)", lambda d: ns.verify_greedy_logits(d, np.zeros((2, 6, 0))),
     ValueError, "V > 0"),
    ("verify_greedy_logits(str)", lambda d: ns.verify_greedy_logits(
        d, np.full((2, 6, 3), "x")), TypeError, "logits must be numeric"),
    ("verify_greedy_logits(flat wrong)", lambda d: ns.verify_greedy_logits(d, np.ones((11, 4))),
     ValueError, r"\(12, V\)"),
]


@pytest.mark.parametrize("name, call, exc, message", BAD_DRAFTS, ids=[b[0] for b in BAD_DRAFTS])
def test_draft_batch_and_verify_bad_input(name, call, exc, message):
    d = _drafts()
    tokens, mask, num = d.tokens.copy(), d.mask.copy(), d.num_drafts.copy()
    with pytest.raises(exc, match=message):
        call(d)
    assert_array_equal(d.tokens, tokens)
    assert_array_equal(d.mask, mask)
    assert_array_equal(d.num_drafts, num)


def test_one_name_for_kv_lens_and_the_old_keywords_still_work():
    d = _drafts()
    kv = [4, 2]
    for method, old in (("positions", "seq_lens"), ("attention_mask", "prefix_lens"),
                        ("additive_attention_mask", "prefix_lens"),
                        ("custom_mask", "prefix_lens")):
        new = getattr(d, method)(kv)
        assert_array_equal(getattr(d, method)(kv_lens=kv), new)
        with pytest.warns(DeprecationWarning, match=f"{old}=.*now called kv_lens"):
            assert_array_equal(getattr(d, method)(**{old: kv}), new)
    assert_array_equal(d.positions(np.array(kv, np.uint8)), d.positions(kv))
    assert_array_equal(d.attention_mask((0, 0))[:, :, -6:], d.mask)


def test_draft_batch_public_constructor_copies_and_freezes():
    d = _drafts()
    tokens = d.tokens.copy()
    mine = ns.DraftBatch(tokens, d.mask.astype(np.uint8), d.num_drafts.astype(np.int64))
    tokens[0, 0] = 99  # the caller's array is not the batch's
    assert_array_equal(mine.tokens, d.tokens)
    assert mine.tokens.dtype == np.int32 and mine.mask.dtype == bool
    assert mine.num_drafts.dtype == np.int32
    for a in (d.tokens, d.mask, d.num_drafts, mine.tokens, mine.mask, d.parents, d.depth):
        assert not a.flags.writeable
    assert_array_equal(mine.parents, d.parents)


BAD_SIMULATE = [
    (dict(config={"capacity": 40}), TypeError, "config must be an NgramConfig"),
    (dict(concurrency=0), ValueError, "concurrency must be >= 1"),
    (dict(concurrency=-3), ValueError, "concurrency must be >= 1"),
    (dict(concurrency=2.0), TypeError, "concurrency must be an int"),
    (dict(concurrency=True), TypeError, "concurrency must be an int"),
    (dict(concurrency="8"), TypeError, "concurrency must be an int"),
    (dict(backend="gpu"), ValueError, "backend must be one of"),
    (dict(backend=None), ValueError, "backend must be one of"),
]


@pytest.mark.parametrize("kwargs, exc, message", BAD_SIMULATE,
                         ids=[str(b[0]) for b in BAD_SIMULATE])
def test_simulate_bad_arguments(kwargs, exc, message):
    rows = [{"id": "a", "prompt_ids": [1, 2, 3], "output_ids": [1, 2, 3, 4]}]
    with pytest.raises(exc, match=message):
        ns.simulate(rows, **kwargs)


BAD_CACHE_HOOKS = [
    ("insert(count_from short)", lambda c: c.insert([[1, 2]], count_from=[0, 0]), ValueError,
     "count_from has 2 values for 1 sequences"),
    ("insert(count_from beyond)", lambda c: c.insert([[1, 2]], count_from=[3]), ValueError,
     r"count_from\[0\] = 3 is beyond"),
    ("insert(count_from negative)", lambda c: c.insert([[1, 2]], count_from=[-1]), ValueError,
     "count_from"),
    ("insert(count_from float)", lambda c: c.insert([[1, 2]], count_from=[0.5]), TypeError,
     r"count_from\[0\]"),
    ("insert(count_from queued)", lambda c: c.insert([[1, 2]], count_from=[3], wait=False),
     ValueError, "count_from"),
    ("match(local, not ADAPTIVE)", lambda c: c.match([[1, 2]], local=[None]), ValueError,
     "ADAPTIVE' only"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, call, exc, message", BAD_CACHE_HOOKS,
                         ids=[b[0] for b in BAD_CACHE_HOOKS])
def test_exact_count_and_local_arguments(backend, name, call, exc, message):
    cache = make(backend)
    before = snapshot(cache)
    with pytest.raises(exc, match=message):
        call(cache)
    assert_same_snapshot(before, snapshot(cache))


@pytest.mark.parametrize("backend", BACKENDS)
def test_adaptive_local_argument_errors(backend):
    cache = ns.NgramCache(**CFG, match_type="ADAPTIVE", backend=backend)
    cache.insert([[1, 2, 3, 4]])
    other = "reference" if backend == "numba" else "numba"
    for local, message in (([None, None], "sequence of 1"), ("ab", "sequence of 1"),
                           ([ns.NgramCache(**CFG, backend=other)], r"local\[0\].*backend"),
                           ([object()], r"local\[0\]")):
        with pytest.raises(TypeError, match=message):
            cache.match([[1, 2]], local=local)
    own = ns.NgramCache(**CFG, match_type="ADAPTIVE", backend=backend)
    assert_array_equal(cache.match([[1, 2]], local=[None]).tokens,
                       cache.match([[1, 2]]).tokens)
    own.insert([[1, 2, 9]])
    assert 9 not in cache.match([[1, 2]]).tokens[0]
    assert 9 in cache.match([[1, 2]], local=[own]).tokens[0]  # its own trie is searched


def test_config_is_keyword_only_everywhere():
    cfg = ns.NgramConfig(**CFG)
    rows = [{"id": "a", "prompt_ids": [1, 2, 3], "output_ids": [1, 2, 3, 4]}]
    with pytest.raises(TypeError, match="positional"):
        ns.Drafter(cfg)
    with pytest.raises(TypeError, match="positional"):
        ns.simulate(rows, cfg)
    with pytest.raises(TypeError, match="positional"):
        ns.NgramCache(cfg)
    assert ns.Drafter(config=cfg).config == cfg
    assert ns.simulate(rows, config=cfg).config == cfg
