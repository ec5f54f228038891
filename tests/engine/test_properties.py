"""Hypothesis properties of drafts, layouts and verification (every backend)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import brute_force_links, build, scenarios

BACKENDS = ["reference", "numba"]


@pytest.mark.parametrize("backend", BACKENDS)
@given(scenarios())
def test_tree_structure_and_layout(backend, scenario):
    cfg, inserts, contexts = scenario
    cache = build(backend, cfg, inserts)
    d = cache.match(contexts)
    n = cfg["draft_token_num"]
    assert d.tokens.shape == (len(contexts), n)
    for b, ctx in enumerate(contexts):
        m = d.mask[b]
        k = int(d.num_drafts[b])
        assert 0 <= k <= n - 1
        assert d.tokens[b, 0] == ctx[-1]
        assert m.diagonal().all() and m[:, 0].all()
        assert not np.triu(m, 1).any()  # ancestors precede descendants
        depth, parent, next_token, next_sibling = brute_force_links(m)
        assert_array_equal(d.depth[b], depth)
        assert_array_equal(d.parents[b], parent)
        assert_array_equal(d.retrieve_next_token[b], next_token)
        assert_array_equal(d.retrieve_next_sibling[b], next_sibling)
        assert_array_equal(d.retrieve_index[b], b * n + np.arange(n))
        for i in range(1, n):
            p = parent[i]
            # Ancestor-closed: a row is its parent's row plus itself.
            expect = m[p].copy()
            expect[i] = True
            assert_array_equal(m[i], expect)
        assert all(depth[i] <= depth[i + 1] for i in range(1, k))  # level order
        assert all(d.tokens[b, i] == 0 and parent[i] == 0 for i in range(k + 1, n))  # pads
        # Siblings among real drafts carry distinct tokens.
        for p in set(parent[1:k + 1]):
            sib = [int(d.tokens[b, i]) for i in range(1, k + 1) if parent[i] == p]
            assert len(sib) == len(set(sib))


def own_trie_walk(cache: ns.NgramCache):
    """A walk over the trie the cache itself holds (its canonical content), whatever backend."""
    c = cache._canonical()
    children = {(p, t): k for k, (t, p) in enumerate(zip(c.node_token.tolist(),
                                                         c.node_parent.tolist()))}

    def walk(tokens):
        cur = -1  # the root
        for t in tokens:
            cur = children.get((cur, t))
            if cur is None:
                return None
        return cur
    return walk


@pytest.mark.parametrize("backend", BACKENDS)
@given(scenarios())
def test_drafts_are_trie_continuations_of_a_context_suffix(backend, scenario):
    cfg, inserts, contexts = scenario
    cache = build(backend, cfg, inserts)
    walk = own_trie_walk(cache)
    d = cache.match(contexts)
    for b, ctx in enumerate(contexts):
        for i in range(1, int(d.num_drafts[b]) + 1):
            path = [int(d.tokens[b, j]) for j in range(1, i + 1) if d.mask[b, i, j]]
            longest = min(len(ctx), cfg["max_trie_depth"])
            suffixes = [ctx[len(ctx) - s:] for s in range(1, longest + 1)]
            note(f"request {b} slot {i} path {path}")
            assert any(walk(s + path) is not None for s in suffixes)


@pytest.mark.parametrize("backend", BACKENDS)
@given(scenarios(), st.data())
def test_verify_accepts_a_followed_path_whole(backend, scenario, data):
    cfg, inserts, contexts = scenario
    cache = build(backend, cfg, inserts)
    d = cache.match(contexts)
    n = cfg["draft_token_num"]
    bonus = 10**6 + 7  # no draft token has this id
    pred = np.asarray(data.draw(st.lists(st.lists(st.integers(-1, 6), min_size=n, max_size=n),
                                         min_size=len(contexts), max_size=len(contexts))))
    targets = []
    for b in range(len(contexts)):
        k = int(d.num_drafts[b])
        i = data.draw(st.integers(0, k))
        path = [j for j in range(1, i + 1) if d.mask[b, i, j]]
        for parent_slot, child_slot in zip([0] + path, path):
            pred[b, parent_slot] = d.tokens[b, child_slot]
        pred[b, i] = bonus
        targets.append(path)
    r = ns.verify_greedy(d, pred)
    for b, path in enumerate(targets):
        assert r.accept_lens[b] == len(path) + 1
        assert_array_equal(r.accept_index[b, :len(path) + 1], [0] + path)
        assert (r.accept_index[b, len(path) + 1:] == -1).all()
        assert_array_equal(r.emitted[b], [int(d.tokens[b, j]) for j in path] + [bonus])


@pytest.mark.parametrize("backend", BACKENDS)
@given(scenarios())
def test_stateful_equals_stateless_while_the_trie_is_unchanged(backend, scenario):
    cfg, inserts, contexts = scenario
    cache = build(backend, cfg, inserts)
    depth = cfg["max_trie_depth"]
    seq = [t for ctx in contexts for t in ctx]
    for end in range(1, len(seq) + 1):
        window = seq[max(0, end - depth):end]
        stateful = cache.match([window], request_ids=["grow"], total_lens=[end])
        stateless = cache.match([window])
        assert_array_equal(stateful.tokens, stateless.tokens)
        assert_array_equal(stateful.mask, stateless.mask)
