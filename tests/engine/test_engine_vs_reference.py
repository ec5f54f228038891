"""The Numba engine equals the reference model, both profiles: random scenarios, wide fan-outs,
and ngramspec.testing's state machine (insert / stateful and stateless match / erase / reset,
under heavy eviction); profile sglang-0.5.9 matches on the last max_match_window_size tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ngramspec as ns
from ngramspec.testing import assert_drafts_equal, check_drafter
from ngramspec.testing.strategies import configs, token_sequences, vocabularies

PROFILES = ["sglang-0.5.23", "sglang-0.5.9"]


def pair(config: ns.NgramConfig) -> tuple[ns.NgramCache, ns.NgramCache]:
    return (ns.NgramCache(config=config, backend="reference"),
            ns.NgramCache(config=config, backend="numba"))


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_state_machine(profile):
    """Insert / match (stateful with reused, growing and jumping lengths; stateless) / erase /
    reset, drafts and node counts compared after every step, at check_drafter's defaults."""
    check_drafter(lambda config: ns.NgramCache(config=config, backend="numba"), profile=profile)


@pytest.mark.parametrize("profile", PROFILES)
@given(data=st.data())
def test_random_scenarios(profile, data):
    cfg = data.draw(configs(profile=profile))
    vocab = data.draw(vocabularies())
    ref, eng = pair(cfg)
    for _ in range(data.draw(st.integers(1, 8))):
        batch = data.draw(st.lists(token_sequences(vocab), min_size=1, max_size=4))
        ref.insert(batch)
        eng.insert(batch)
        assert len(ref) == len(eng) <= cfg.capacity
        ctxs = data.draw(st.lists(token_sequences(vocab, min_size=1,
                                                  max_size=cfg.match_length + 4),
                                  min_size=1, max_size=4))
        if data.draw(st.booleans()):
            assert_drafts_equal(eng.match(ctxs), ref.match(ctxs))
        else:
            ids = [f"r{i}" for i in range(len(ctxs))]
            lens = [len(c) + data.draw(st.integers(0, 3)) for c in ctxs]
            assert_drafts_equal(eng.match(ctxs, request_ids=ids, total_lens=lens),
                                ref.match(ctxs, request_ids=ids, total_lens=lens))


@pytest.mark.parametrize("profile", PROFILES)
@given(st.integers(14, 70), st.sampled_from(["BFS", "PROB"]), st.integers(0, 2),
       st.randoms(use_true_random=False))
def test_wide_fanout_rehash_orders(profile, children, match_type, base, rnd):
    """More than 13, 29 or 59 children under one draft-tree node exercise unordered_map rehashes."""
    tokens = rnd.sample(range(-500, 500), children)
    common = dict(min_bfs_breadth=64, max_bfs_breadth=64, draft_token_num=64,
                  match_type=match_type, capacity=10_000)
    if profile == "sglang-0.5.23":
        cfg = ns.NgramConfig(max_trie_depth=2, **common)
        batch = [[base, t] for t in tokens] + [[base, tokens[0]]] * rnd.randint(0, 3)
    else:
        cfg = ns.NgramConfig(profile=profile, branch_length=3, min_match_window_size=1,
                             max_match_window_size=2, **common)
        # The trailing 0 keeps [base, t] a full suffix path (0.5.9 skips the last min_w starts).
        batch = [[base, t, 0] for t in tokens] + [[base, tokens[0], 0]] * rnd.randint(0, 3)
    ref, eng = pair(cfg)
    ref.insert(batch)
    eng.insert(batch)
    assert_drafts_equal(eng.match([[base]]), ref.match([[base]]))
    drafted = ref.match([[base]]).num_drafts[0]
    if profile == "sglang-0.5.23":
        assert drafted == min(63, children)
    else:
        assert drafted >= min(63, children)


@given(configs(profile="sglang-0.5.9"), st.sampled_from([(0, 1), (0, 3), (-2, 5)]), st.data())
def test_only_the_last_max_window_tokens_matter(cfg, vocab, data):
    """0.5.9 anchors are the suffixes of at most max_match_window_size tokens, and stateless."""
    ref, eng = pair(cfg)
    batch = data.draw(st.lists(token_sequences(vocab, max_size=40), min_size=1, max_size=4))
    ref.insert(batch)
    eng.insert(batch)
    ctx = data.draw(token_sequences(vocab, min_size=1, max_size=30))
    tail = ctx[-cfg.max_match_window_size:]
    for cache in (ref, eng):
        full = cache.match([ctx], request_ids=["r"], total_lens=[len(ctx) + 5])
        assert_drafts_equal(full, cache.match([tail]))
        assert_drafts_equal(full, cache.match([ctx]))
