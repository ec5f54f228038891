"""The automata's pool (one set of record arrays for all loaded corpora, which the match
kernels take): the automata hold views into it while it is in use, and removing a corpus lets
it go, the remaining automata drafting as in a cache that never held the removed one."""

from __future__ import annotations

import numpy as np
import pytest

import ngramspec as ns
from ngramspec.engine.corpora.sam import FlatAutomaton, automata_pool

CORPORA = {"a": [[1, 2, 3, 4], [7, 1, 2, 9]], "b": [[1, 2, 5, 6]], "c": [[2, 5, 8, 1, 2, 3]]}


def _cache(ids, match_type="BFS"):
    cache = ns.NgramCache(draft_token_num=8, external_sam_budget=6, match_type=match_type)
    for cid in ids:
        cache.add_corpus(cid, CORPORA[cid])
    return cache


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_removing_a_pooled_corpus_frees_the_pool_and_drafts_as_without_it(match_type):
    cache = _cache(["a", "b", "c"], match_type)
    cache.insert([[5, 1, 2, 7]])
    cache.match([[1, 2]])  # the pool is built
    automata = cache._corpora.automata
    assert all(isinstance(a.states.base, np.ndarray) for a in automata.values())
    cache.remove_corpus("b")
    assert not any(isinstance(a.states.base, np.ndarray) for a in automata.values())
    fresh = _cache(["a", "c"], match_type)
    fresh.insert([[5, 1, 2, 7]])
    for ctx in ([1, 2], [2], [5, 8], [9]):
        got, want = cache.match([ctx]), fresh.match([ctx])
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.mask, want.mask)
    assert cache.corpus_info() == fresh.corpus_info()


def test_pool_holds_each_automaton_at_its_bases():
    autos = [FlatAutomaton.build(np.asarray(d, np.int32), prob=True)
             for d in ([1, 2, 3, 1, 2, 4], [5, 6], [-(2**31) + 1, 7, 7, 7])]
    copies = [tuple(x.copy() for x in a.arrays()) for a in autos]
    states, edges, kids, root, bases = automata_pool(autos, adopt=True)
    for (sb, eb, rb, rmask), a, own in zip(bases.tolist(), autos, copies):
        assert rmask == a.root.shape[0] - 1
        for view, part, start in zip(a.arrays(), (states, edges, kids, root), (sb, eb, eb, rb)):
            np.testing.assert_array_equal(part[start:start + view.shape[0]], view)
        for view, old in zip(a.arrays(), own):
            np.testing.assert_array_equal(view, old)
    with pytest.raises(ValueError, match="different match types"):
        automata_pool([autos[0], FlatAutomaton.build(np.asarray([1, 2], np.int32), prob=False)])
