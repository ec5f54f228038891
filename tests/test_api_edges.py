"""The API's edges a new user meets first (issue 37, item 4): torch tensors wherever token ids
(and lengths) are taken, through the one coercion of ``ngramspec._validate``; torch dtypes in
the mask helpers; a duplicate request id named as such; negative token ids refused where the
serving loop takes them (the Drafter), accepted where SGLang accepts them (the cache)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns

torch = pytest.importorskip("torch")

CFG = ns.NgramConfig(max_trie_depth=6, draft_token_num=4, capacity=1000)
PROBES = [[1], [2], [1, 2], [3], [9], [1, 2, 3], [7, 1]]


def same_trie(a, b):
    """The same drafts for every probe and the same node count."""
    assert len(a) == len(b)
    for ctx in PROBES:
        assert_array_equal(a.match([ctx]).tokens, b.match([ctx]).tokens)


@pytest.fixture(params=["numba", "reference"])
def backend(request):
    return request.param


class OnDevice:
    """A tensor on an accelerator, as far as ngramspec can tell without torch: ``.numpy()``
    refuses until ``.cpu()`` is called (torch's own rule for CUDA tensors)."""

    def __init__(self, t):
        self.t, self.moved = t, False

    def detach(self):
        return self

    def cpu(self):
        self.moved = True
        return self.t

    def numpy(self):
        raise TypeError("can't convert cuda:0 device type tensor to numpy")

    def __array__(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy")


# --- torch tensors wherever token ids are taken ------------------------------------------------

def test_cache_takes_tensors_as_it_takes_arrays(backend):
    rows = [[1, 2, 3, 4, 1, 2, 5], [7, 1, 2, 3, 9, 9, 9]]
    want = ns.NgramCache(config=CFG, backend=backend)
    want.insert(rows)
    for form in (torch.tensor(rows), torch.tensor(rows, dtype=torch.int32),
                 [torch.tensor(r) for r in rows], torch.tensor(rows)[:, ::1]):
        got = ns.NgramCache(config=CFG, backend=backend)
        got.insert(form)
        same_trie(got, want)
    ctx = [[1, 2], [3, 9]]
    expect = want.match(ctx, request_ids=["a", 7], total_lens=[5, 9]).tokens
    fresh = ns.NgramCache(config=CFG, backend=backend)
    fresh.insert(torch.tensor(rows))
    got = fresh.match(torch.tensor(ctx), request_ids=["a", 7], total_lens=torch.tensor([5, 9]))
    assert_array_equal(got.tokens, expect)
    assert_array_equal(fresh.match([torch.tensor([1, 2])]).tokens, want.match([[1, 2]]).tokens)
    fresh.insert([torch.tensor([5, 6, 7])], count_from=torch.tensor([1]))


def test_a_one_dimensional_tensor_is_one_sequence_and_says_so():
    cache = ns.NgramCache(config=CFG)
    with pytest.raises(ValueError, match=r"a 1-D array is one sequence: wrap it as \[array\]"):
        cache.insert(torch.tensor([1, 2, 3]))


def test_a_tensor_on_a_device_is_copied_to_the_host():
    cache, want = ns.NgramCache(config=CFG), ns.NgramCache(config=CFG)
    rows = OnDevice(torch.tensor([[1, 2, 3, 1, 2, 4]]))
    cache.insert(rows)
    want.insert([[1, 2, 3, 1, 2, 4]])
    assert rows.moved
    same_trie(cache, want)
    one = OnDevice(torch.tensor([1, 2]))
    assert_array_equal(cache.match([one]).tokens, want.match([[1, 2]]).tokens)
    assert one.moved


def test_tensor_dtypes_that_are_no_token_ids_are_refused_in_one_line():
    cache = ns.NgramCache(config=CFG)
    with pytest.raises(TypeError, match=r"sequences\[0\] must hold integer token ids, got "
                                        r"dtype float32"):
        cache.insert([torch.tensor([1.0, 2.0])])
    with pytest.raises(TypeError, match=r"sequences\[0\] must hold integer token ids, got a "
                                        r"tensor of dtype torch.bfloat16"):
        cache.insert([torch.tensor([1, 2], dtype=torch.bfloat16)])


def test_drafter_takes_tensors_everywhere():
    def run(prompt, first, emitted, rids, max_tokens):
        dr = ns.Drafter(config=CFG)
        dr.add_request("a", prompt, first_token=first)
        dr.propose(rids)
        dr.accept({"a": emitted}, max_tokens=max_tokens)
        d = dr.propose(rids)
        return dr.sequence("a").tolist(), d.tokens.tolist()

    plain = run([1, 2, 3, 1, 2], 3, [1], ["a"], [5])
    assert run(torch.tensor([1, 2, 3, 1, 2]), torch.tensor(3), torch.tensor([1]), ["a"],
               torch.tensor([5])) == plain
    assert run(OnDevice(torch.tensor([1, 2, 3, 1, 2])), torch.tensor([3]), [1], ["a"],
               5) == plain


def test_verify_and_lengths_take_tensors():
    cache = ns.NgramCache(config=CFG)
    cache.insert([[2, 4, 3]])
    d = cache.match([[2]])
    want = ns.verify_greedy(d, [[4, 3, 9, 9]])
    got = ns.verify_greedy(d, OnDevice(torch.tensor([[4, 3, 9, 9]])))
    assert [e.tolist() for e in got.emitted] == [e.tolist() for e in want.emitted]
    assert_array_equal(d.positions(torch.tensor([7])), d.positions([7]))
    assert_array_equal(d.attention_mask(torch.tensor([2])), d.attention_mask([2]))


# --- torch dtypes in the mask helpers ---------------------------------------------------------

def test_additive_mask_in_a_torch_dtype_is_a_torch_tensor():
    cache = ns.NgramCache(config=CFG)
    cache.insert([[2, 4, 3]])
    d = cache.match([[2]])
    want = d.additive_attention_mask([2, ], dtype=np.float32)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        got = d.additive_attention_mask([2], dtype=dtype)
        assert isinstance(got, torch.Tensor) and got.dtype == dtype
        assert got.device.type == "cpu"
        assert_array_equal(got.float().numpy(), want)
    got = d.additive_attention_mask(torch.tensor([2]), dtype=torch.float32, device="cpu")
    assert_array_equal(got.numpy(), want)
    with pytest.raises(TypeError, match=r"dtype must be a floating dtype.*got torch.int64"):
        d.additive_attention_mask([2], dtype=torch.int64)
    with pytest.raises(ValueError, match=r"device= goes with a torch dtype"):
        d.additive_attention_mask([2], dtype=np.float32, device="cpu")


# --- a duplicate request id is named as such --------------------------------------------------

def test_propose_names_a_duplicate_id():
    dr = ns.Drafter(config=CFG)
    dr.add_request("r1", [1, 2, 3], first_token=4)
    with pytest.raises(ValueError, match=r"^duplicate request id 'r1' in rids \(rids\[0\] and "
                                         r"rids\[1\]\)"):
        dr.propose(["r1", "r1"])
    dr.propose(["r1"])
    with pytest.raises(ValueError, match=r"rids\[0\] = 'r1' was proposed and not accepted"):
        dr.propose(["r1"])


def test_match_names_a_duplicate_id(backend):
    cache = ns.NgramCache(config=CFG, backend=backend)
    for ctxs in ([[1], [2]], [np.array([1], np.int32), np.array([2], np.int32)]):
        with pytest.raises(ValueError, match=r"^duplicate request id 7 in request_ids "
                                             r"\(request_ids\[0\] and request_ids\[1\]\)"):
            cache.match(ctxs, request_ids=[7, 7], total_lens=[1, 1])


# --- negative token ids -----------------------------------------------------------------------

@pytest.mark.parametrize("call, where", [
    (lambda dr: dr.add_request("b", [4, 5, -1, 6], first_token=1), r"prompt_ids\[2\] = -1"),
    (lambda dr: dr.add_request("b", np.array([4, 5, -1], np.int64), first_token=1),
     r"prompt_ids\[2\] = -1"),
    (lambda dr: dr.add_request("b", torch.tensor([-3]), first_token=1), r"prompt_ids\[0\] = -3"),
    (lambda dr: dr.add_request("b", [4, 5], first_token=-1), r"first_token = -1"),
    (lambda dr: dr.add_request("b", [4, 5], first_token=np.int32(-2)), r"first_token = -2"),
])
def test_drafter_refuses_negative_ids_when_a_request_enters(call, where):
    dr = ns.Drafter(config=CFG)
    with pytest.raises(ValueError, match=where + r" is a negative token id; token ids must be "
                                                 r">= 0"):
        call(dr)
    assert dr.requests == []


def test_drafter_refuses_negative_emitted_tokens_in_either_form():
    dr = ns.Drafter(config=CFG)
    dr.add_request("a", [1, 2, 3, 1, 2], first_token=3)
    dr.add_request("b", [1, 2, 3, 1, 2], first_token=3)
    d = dr.propose(["a", "b"])
    with pytest.raises(ValueError, match=r"emitted\['b'\]\[0\] = -1 is a negative token id"):
        dr.accept({"a": [9], "b": [-1]})
    r = ns.verify_greedy(d, np.full((2, 4), -1))  # -1 "padding" as the target's argmax
    with pytest.raises(ValueError, match=r"emitted\['a'\]\[0\] = -1 is a negative token id"):
        dr.accept(r)
    with pytest.raises(ValueError, match=r"emitted\['a'\]\[0\] = -1 is a negative token id"):
        dr.verify_and_accept(d, np.full((2, 4), -1))
    assert dr.pending == ["a", "b"]  # nothing recorded
    dr.accept({"a": [9], "b": [8]})
    assert dr.output("b").tolist() == [3, 8]


def test_the_cache_keeps_sglangs_int32_domain():
    # SGLang's own class takes any int32 id (its recorded 0.5.9 scenarios include negative
    # ones, which replay_golden reproduces): the cache stays as faithful as that.
    cache = ns.NgramCache(config=CFG)
    cache.insert([[-5, -7, 3]])
    assert cache.match([[-5]]).tokens[0, :3].tolist() == [-5, -7, 3]


def test_tokens_past_max_tokens_are_dropped_unread():
    # A replay predicts -1 past the end of a recording and cuts there with max_tokens.
    dr = ns.Drafter(config=CFG)
    dr.add_request("a", [1, 2, 3, 1, 2], first_token=3)
    d = dr.propose(["a"])  # no drafts yet: token-0 padding under the root
    r = ns.verify_greedy(d, [[0, -1, -1, -1]])
    assert r.emitted[0].tolist() == [0, -1]
    with pytest.raises(ValueError, match=r"emitted\['a'\]\[1\] = -1 is a negative token id"):
        dr.accept(r)
    with pytest.raises(ValueError, match=r"emitted\['a'\]\[1\] = -1 is a negative token id"):
        dr.accept({"a": [0, -1]}, max_tokens=2)
    dr.accept(r, max_tokens=1)
    assert dr.output("a").tolist() == [3, 0]


def test_a_corpus_takes_tensors_too():
    cfg = ns.NgramConfig(external_sam_budget=2, capacity=1000)
    drafts, loaded = [], []
    for docs in ([torch.tensor([5, 6, 7, 8]), torch.tensor([1, 2, 3])], [[5, 6, 7, 8], [1, 2, 3]]):
        cache = ns.NgramCache(config=cfg)
        loaded.append(cache.add_corpus("docs", docs))
        drafts.append(cache.match([[9, 5, 6]], request_ids=["r"], total_lens=[3]))
    assert loaded[0] == loaded[1]
    assert drafts[0].tokens[0, 1:3].tolist() == [7, 8]  # drafted from the corpus
    assert_array_equal(drafts[0].tokens, drafts[1].tokens)
    assert_array_equal(drafts[0].mask, drafts[1].mask)
