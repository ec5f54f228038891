"""Worked examples of the SGLang spec (sections 3.2, 5.3, 6, 7.1, 10), all produced by SGLang's
compiled C++ core, as explicit tests on every backend."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns

BACKENDS = ["reference", "numba"]


def make(backend, **kw):
    return ns.NgramCache(backend=backend, **kw)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_example_1(backend, match_type):
    c = make(backend, max_trie_depth=4, min_bfs_breadth=1, max_bfs_breadth=3, draft_token_num=5,
             match_type=match_type, capacity=1000)
    c.insert([[1, 2, 3, 1, 2, 4]])
    d = c.match([[3, 1, 2]], request_ids=["new"], total_lens=[3])
    assert_array_equal(d.tokens, [[2, 3, 4, 1, 2]])
    assert_array_equal(d.mask[0].astype(int), [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0],
                                               [1, 1, 0, 1, 0], [1, 1, 0, 1, 1]])
    assert_array_equal(d.depth, [[0, 1, 1, 2, 3]])
    assert_array_equal(d.positions([7]), [[7, 8, 8, 9, 10]])
    assert_array_equal(d.retrieve_next_token, [[1, 3, -1, 4, -1]])
    assert_array_equal(d.retrieve_next_sibling, [[-1, 2, -1, -1, -1]])
    assert_array_equal(d.num_drafts, [4])


def example_2(backend, match_type):
    c = make(backend, max_trie_depth=4, min_bfs_breadth=1, max_bfs_breadth=2, draft_token_num=4,
             match_type=match_type, capacity=1000)
    for seq in ([5, 1, 2, 3, 7], [1, 2, 3, 8], [9, 1, 2, 4]):
        c.insert([seq])
    return c.match([[1, 2]], request_ids=["q"], total_lens=[2])


def test_example_2_bfs_underfills(backend):
    d = example_2(backend, "BFS")
    assert_array_equal(d.tokens, [[2, 4, 0, 0]])
    assert_array_equal(d.mask[0].astype(int), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0],
                                               [1, 0, 0, 1]])
    assert_array_equal(d.num_drafts, [1])


def test_example_2_prob_heap_tie_and_verify(backend):
    d = example_2(backend, "PROB")
    assert_array_equal(d.tokens, [[2, 4, 3, 7]])
    assert_array_equal(d.mask[0].astype(int), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0],
                                               [1, 0, 1, 1]])
    assert_array_equal(d.retrieve_next_token, [[1, -1, 3, -1]])
    assert_array_equal(d.retrieve_next_sibling, [[-1, 2, -1, -1]])
    r = ns.verify_greedy(d, [[3, 99, 7, 11]])
    assert_array_equal(r.accept_index, [[0, 2, 3, -1]])
    assert_array_equal(r.accept_lens, [3])
    assert_array_equal(r.emitted[0], [3, 7, 11])


@pytest.mark.parametrize("draft, stateful, stateless",
                         [(2, [4, 7], [4, 9]), (6, [4, 9, 7, 10, 0, 0], [4, 7, 9, 10, 0, 0])])
def test_incremental_state_diverges_from_stateless(backend, draft, stateful, stateless):
    c = make(backend, max_trie_depth=6, min_bfs_breadth=1, max_bfs_breadth=4,
             draft_token_num=draft, capacity=1000)
    c.insert([[1, 3]])
    c.match([[2, 3]], request_ids=["r"], total_lens=[2])
    c.insert([[2, 3, 4, 9, 10]])
    c.insert([[3, 4, 7]])
    assert_array_equal(c.match([[2, 3, 4]], request_ids=["r"], total_lens=[3]).tokens[0],
                       stateful)
    assert_array_equal(c.match([[2, 3, 4]]).tokens[0], stateless)
    # An erased request starts afresh, which is a rebuild, which is stateless matching.
    c.erase(["r"])
    assert_array_equal(c.match([[2, 3, 4]], request_ids=["r"], total_lens=[3]).tokens[0],
                       stateless)


def test_padding_quirk_accepts_a_token_zero_pad():
    d = ns.DraftBatch(np.array([[2, 4, 0, 0]], dtype=np.int32),
                      np.array([[[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1]]],
                               dtype=bool), np.array([1], dtype=np.int32))
    r = ns.verify_greedy(d, [[0, 5, 6, 7]])
    assert_array_equal(r.accept_index, [[0, 2, -1, -1]])
    assert_array_equal(r.emitted[0], [0, 6])
    assert_array_equal(r.accept_lens, [2])


def test_repeated_token_chain(backend):
    c = make(backend, max_trie_depth=5, draft_token_num=8, capacity=1000)
    c.insert([[7] * 12])
    d = c.match([[7, 7, 7]])
    assert_array_equal(d.tokens, [[7, 7, 7, 7, 7, 0, 0, 0]])
    assert_array_equal(d.num_drafts, [4])


def test_empty_trie_and_draft_one(backend):
    c = make(backend, draft_token_num=5, capacity=100)
    d = c.match([[3, 9]])
    assert_array_equal(d.tokens, [[9, 0, 0, 0, 0]])
    assert_array_equal(d.mask[0], np.eye(5, dtype=bool) | (np.arange(5) == 0)[None, :])
    c1 = make(backend, draft_token_num=1, capacity=100)
    c1.insert([[1, 2, 3]])
    d1 = c1.match([[1, 2]])
    assert_array_equal(d1.tokens, [[2]])
    assert_array_equal(d1.mask, [[[True]]])


SGLANG_UNIT = {
    "BFS": [[3, 4, 44, 5, 55, 6, 66, 77], [44, 55, 66, 77, 88, 99, 100, 0], [999] + [0] * 7],
    "PROB": [[3, 44, 4, 55, 5, 66, 6, 7], [44, 55, 66, 77, 88, 99, 100, 0], [999] + [0] * 7],
}


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_sglang_unit_test_golden_ids(backend, match_type):
    c = make(backend, max_trie_depth=12, min_bfs_breadth=1, max_bfs_breadth=8,
             draft_token_num=8, match_type=match_type, capacity=100000)
    c.insert([list(range(1, 11)), [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]])
    d = c.match([[1, 2, 3], [3, 44], [3, 6, 999]])
    assert_array_equal(d.tokens, SGLANG_UNIT[match_type])
    assert_array_equal(d.mask[1, 7].astype(int), [1, 0, 0, 0, 0, 0, 0, 1])  # a pad row
    assert_array_equal(d.mask[:, 0].astype(int), np.eye(8, dtype=int)[[0, 0, 0]])
    assert_array_equal(d.num_drafts, [7, 6, 0])
