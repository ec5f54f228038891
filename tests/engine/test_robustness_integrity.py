"""check_integrity() and eviction under pressure: tiny capacities from depth + 1 upward, both
backends checked after every step, the engine equal to the reference in drafts and in its
whole canonical content (nodes, frequencies, LRU order, match states)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import canonical as _canonical
from ngramspec.testing import assert_drafts_equal, check_drafter


def canonical_equal(a: ns.NgramCache, b: ns.NgramCache) -> None:
    ea, xa, ka = _canonical(a)
    eb, xb, kb = _canonical(b)
    assert ea == eb and ka == kb
    for name in xa:
        assert_array_equal(xa[name], xb[name], err_msg=name)


def intact_and_equal(eng: ns.NgramCache, ref: ns.NgramCache) -> None:
    ref.check_integrity()
    eng.check_integrity()
    assert len(ref) == len(eng) <= ref.config.capacity
    canonical_equal(ref, eng)


@pytest.mark.parametrize("profile", ["sglang-0.5.23", "sglang-0.5.9"])
def test_eviction_under_pressure(profile):
    """Tight capacities only; after every step both caches intact, the engine's whole
    canonical content (nodes, frequencies, LRU order, match states) equal to the reference's."""
    check_drafter(lambda config: ns.NgramCache(config=config, backend="numba"), profile=profile,
                  tight=True, max_examples=30, steps=30, compare=intact_and_equal)


@pytest.mark.parametrize("backend", ["numba", "reference"])
@given(depth=st.integers(2, 12), extra=st.integers(0, 3),
       seqs=st.lists(st.lists(st.integers(0, 50), max_size=40), min_size=1, max_size=6))
@settings(max_examples=25, deadline=None)
def test_capacity_depth_plus_one_upward_never_fails(backend, depth, extra, seqs):
    """SGLang aborts at capacity <= depth and crashes at depth; from depth + 1 we never fail."""
    cache = ns.NgramCache(max_trie_depth=depth, capacity=depth + 1 + extra, backend=backend)
    for s in seqs:
        cache.insert([s])
        assert len(cache) <= depth + 1 + extra
        cache.check_integrity()
    if any(seqs):
        last = [s for s in seqs if s][-1]
        ref = ns.NgramCache(max_trie_depth=depth, capacity=depth + 1 + extra, backend="reference")
        for s in seqs:
            ref.insert([s])
        tail = last[-min(len(last), depth):]
        assert_drafts_equal(cache.match([tail[:-1] or tail]), ref.match([tail[:-1] or tail]))
        if len(last) >= 2 and extra >= 1:
            # The newest suffix paths survive: eviction only removes least recently used
            # leaves, so [last[-2], last[-1]] is still there, last[-1] the most recent child
            # of last[-2], which BFS drafts first (slots follow unordered_map order, not
            # recency: look among the root's children).
            d = cache.match([[last[-2]]])
            k = int(d.num_drafts[0])
            assert k >= 1
            assert last[-1] in d.tokens[0, 1:k + 1][d.parents[0, 1:k + 1] == 0].tolist()


# check_integrity must fail on every kind of damage it claims to detect.

def _engine_with_content():
    cache = ns.NgramCache(max_trie_depth=4, capacity=40, draft_token_num=6)
    cache.insert([[1, 2, 3, 1, 2, 4, 5, 1, 2, 3]])
    cache.match([[1, 2]], request_ids=["r"], total_lens=[2])
    cache.check_integrity()
    return cache


def _corrupt_parent(t):
    v = int(t.g_next[t.meta[1]])
    t.par[v] = v


def _corrupt_freq(t):
    head = int(t.c_head[0])
    t.freq[head] = 0


def _corrupt_freq_sum(t):
    v = int(t.meta[1])  # the most recent node has children (shallow ... deep)
    c = int(t.c_head[v])
    t.freq[c] = t.freq[v] + 1


def _corrupt_c_head(t):
    # A leaf claims a child that belongs to another parent.
    leaf = int(t.meta[2])
    t.c_head[leaf] = int(t.c_head[0])


def _corrupt_c_prev(t):
    c = int(t.c_head[0])
    t.c_prev[int(t.c_next[c])] = -1


def _corrupt_lru_order(t):
    # Swap the first two nodes of the global list (a parent and its child).
    from ngramspec.engine.trie import M_GHEAD, M_GTAIL, _g_push_front, _unlink
    a = int(t.meta[M_GHEAD])
    b = int(t.g_next[a])
    _unlink(t.g_next, t.g_prev, t.meta, M_GHEAD, M_GTAIL, b)
    _g_push_front(t.g_next, t.g_prev, t.meta, b)
    assert t.meta[M_GTAIL] != -1


def _corrupt_lru_tail(t):
    t.meta[2] = t.meta[1]


def _corrupt_table(t):
    used = np.flatnonzero(t.ht != -1)
    t.ht[used[0]] = -1


def _corrupt_table_value(t):
    used = np.flatnonzero(t.ht != -1)
    t.ht[used[0]], t.ht[used[1]] = t.ht[used[1]], t.ht[used[0]]


def _corrupt_table_duplicate(t):
    # One node entered twice, another lost: the entry count still matches.
    used = np.flatnonzero(t.ht != -1)
    t.ht[used[0]] = t.ht[used[1]]


def _corrupt_free_stack(t):
    from ngramspec.engine.trie import M_FREEHEAD
    t.g_next[0] = -1
    t.meta[M_FREEHEAD] = 0  # the root handed back as a free slot
    t.meta[4] += 1
    t.meta[0] -= 1


def _corrupt_free_count(t):
    t.meta[4] += 1  # more free slots claimed than the list holds
    t.meta[0] -= 1


def _corrupt_size(t):
    t.meta[0] += 1


def _corrupt_sibling_tokens(t):
    c = int(t.c_head[0])
    t.tok[int(t.c_next[c])] = t.tok[c]


@pytest.mark.parametrize("damage", [_corrupt_parent, _corrupt_freq, _corrupt_freq_sum,
                                    _corrupt_c_head, _corrupt_c_prev, _corrupt_lru_order,
                                    _corrupt_lru_tail, _corrupt_table, _corrupt_table_value,
                                    _corrupt_table_duplicate, _corrupt_free_stack,
                                    _corrupt_free_count, _corrupt_size,
                                    _corrupt_sibling_tokens])
def test_engine_integrity_detects_damage(damage):
    _damaged_cache_is_refused(_engine_with_content(), damage)


def test_engine_integrity_detects_bad_states():
    cache = _engine_with_content()
    b = cache._backend
    row = b._rows["r"]
    b.named_states.n[row] = cache.config.trie_depth + 1
    with pytest.raises(ns.IntegrityError, match="match state"):
        cache.check_integrity()
    cache = _engine_with_content()
    b = cache._backend
    b._free_rows.append(b._rows["r"])
    with pytest.raises(ns.IntegrityError, match="free rows"):
        cache.check_integrity()


def _reference_with_content():
    cache = ns.NgramCache(max_trie_depth=4, capacity=40, draft_token_num=6, backend="reference")
    cache.insert([[1, 2, 3, 1, 2, 4, 5, 1, 2, 3]])
    cache.match([[1, 2]], request_ids=["r"], total_lens=[2])
    cache.check_integrity()
    return cache


def _ref_lru_swap(trie):
    nodes = list(trie.global_lru)
    trie.global_lru.move_to_end(nodes[1], last=False)


def _ref_freq(trie):
    node = next(iter(trie.global_lru))
    node.lru[0].freq = node.freq + 1


def _ref_lost_child(trie):
    node = next(iter(trie.global_lru))
    node.lru.pop()


def _ref_wrong_parent(trie):
    node = next(iter(trie.global_lru))
    node.lru[0].parent = trie.root


def _ref_sibling_order(trie):
    trie.root.lru.reverse()


@pytest.mark.parametrize("damage", [_ref_lru_swap, _ref_freq, _ref_lost_child, _ref_wrong_parent,
                                    _ref_sibling_order])
def test_reference_integrity_detects_damage(damage):
    _damaged_cache_is_refused(_reference_with_content(), damage)


def _damaged_cache_is_refused(cache, damage):
    damage(cache._backend.trie)
    with pytest.raises(ns.IntegrityError):
        cache.check_integrity()
