"""Worked examples and edge cases of the window-era spec (SGLang 0.5.9), every value produced by
its compiled C++ core (legacy spec sections 9 and 11), on both backends."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns

BACKENDS = ["reference", "numba"]
PROFILE = "sglang-0.5.9"

EXAMPLE_INSERTS = [[5, 1, 2, 3, 7], [1, 2, 3, 8], [9, 1, 2, 4]]


def section11(backend, match_type, **kw):
    c = ns.NgramCache(profile=PROFILE, branch_length=5, min_match_window_size=1,
                      max_match_window_size=2, min_bfs_breadth=1, max_bfs_breadth=3,
                      draft_token_num=5, capacity=1000, match_type=match_type, backend=backend,
                      **kw)
    c.insert(EXAMPLE_INSERTS)
    return c


# Section 11's query [9, 1, 2] per match type: tokens, mask and (BFS) drafted nodes.
SECTION11 = {
    "BFS": ([[2, 3, 4, 8, 0]], [[1, 0, 0, 0, 0],
                                [1, 1, 0, 0, 0],
                                [1, 0, 1, 0, 0],
                                [1, 1, 0, 1, 0],
                                [1, 0, 0, 0, 1]], [3]),
    "PROB": ([[2, 4, 3, 8, 7]], [[1, 0, 0, 0, 0],
                                 [1, 1, 0, 0, 0],
                                 [1, 0, 1, 0, 0],
                                 [1, 0, 1, 1, 0],
                                 [1, 0, 1, 0, 1]], None),
}


@pytest.mark.parametrize("match_type", SECTION11)
@pytest.mark.parametrize("backend", BACKENDS)
def test_section11(backend, match_type):
    tokens, mask, num_drafts = SECTION11[match_type]
    d = section11(backend, match_type).match([[9, 1, 2]])
    assert_array_equal(d.tokens, tokens)
    assert_array_equal(d.mask[0].astype(int), mask)
    if num_drafts is not None:
        assert d.num_drafts.tolist() == num_drafts


@pytest.mark.parametrize("backend", BACKENDS)
def test_section11_contrast_with_0523(backend):
    """The same inserts and query under 0.5.23 (max_trie_depth=5) give other drafts."""
    c = ns.NgramCache(max_trie_depth=5, min_bfs_breadth=1, max_bfs_breadth=3, draft_token_num=5,
                      capacity=1000, backend=backend)
    c.insert(EXAMPLE_INSERTS)
    assert c.match([[9, 1, 2]]).tokens.tolist() == [[2, 3, 4, 7, 8]]
    p = ns.NgramCache(max_trie_depth=5, min_bfs_breadth=1, max_bfs_breadth=3, draft_token_num=5,
                      capacity=1000, match_type="PROB", backend=backend)
    p.insert(EXAMPLE_INSERTS)
    assert p.match([[9, 1, 2]]).tokens.tolist() == [[2, 3, 4, 8, 7]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_token_alone_is_not_inserted(backend):
    """min_match_window_size = 1 skips the lone last token: no root child 7, 8 or 4."""
    c = section11(backend, "BFS")
    for last in (7, 8, 4):
        assert c.match([[last]]).num_drafts.tolist() == [0]
    if backend == "reference":
        assert sorted(c._backend.trie.root.children) == [1, 2, 3, 5, 9]


@pytest.mark.parametrize("backend", BACKENDS)
def test_draft_token_num_1(backend):
    c = ns.NgramCache(profile=PROFILE, draft_token_num=1, capacity=100, backend=backend)
    c.insert([[1, 2, 3, 1, 2, 3]])
    d = c.match([[1, 2]])
    assert_array_equal(d.tokens, [[2]])
    assert_array_equal(d.mask, [[[True]]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_min_window_2(backend):
    c = ns.NgramCache(profile=PROFILE, branch_length=5, min_match_window_size=2,
                      max_match_window_size=3, draft_token_num=5, capacity=100, backend=backend)
    c.insert([[1, 2], [3, 4, 5]])
    # [3,4,5] was inserted; [4,5] (2 tokens <= min_w) and [1,2] were not.
    assert c.match([[3, 4]]).tokens.tolist() == [[4, 5, 0, 0, 0]]
    assert c.match([[1]]).tokens.tolist() == [[1, 0, 0, 0, 0]]
    d = c.match([[1]])
    expected = np.eye(5, dtype=bool)
    expected[:, 0] = True
    assert_array_equal(d.mask[0], expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_repeated_tokens_chain(backend):
    c = ns.NgramCache(profile=PROFILE, branch_length=5, min_match_window_size=1,
                      max_match_window_size=4, draft_token_num=6, capacity=1000, backend=backend)
    c.insert([[7] * 12])
    d = c.match([[7, 7, 7]])
    # A chain of branch_length - 1 = 4 drafts, then one pad.
    assert d.tokens.tolist() == [[7, 7, 7, 7, 7, 0]]
    assert d.num_drafts.tolist() == [4]
    assert d.depth[0].tolist() == [0, 1, 2, 3, 4, 1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("match_type, expected", [
    ("BFS", [[3, 4, 44, 5, 55, 6, 66, 77], [44, 55, 66, 77, 88, 99, 100, 0]]),
    ("PROB", [[3, 44, 4, 55, 5, 66, 6, 7]]),
])
def test_library_demo(backend, match_type, expected):
    """``ngram_cache.py``'s ``__main__`` demo (section 9): the same values as 0.5.23's test."""
    c = ns.NgramCache(profile=PROFILE, branch_length=12, min_match_window_size=1,
                      max_match_window_size=10, min_bfs_breadth=1, max_bfs_breadth=8,
                      draft_token_num=8, capacity=100_000, match_type=match_type,
                      backend=backend)
    c.insert([list(range(1, 11)), [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]])
    queries = [[1, 2, 3], [3, 44]][:len(expected)]
    assert c.match(queries).tokens.tolist() == expected
