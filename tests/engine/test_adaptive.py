"""The options beyond SGLang: exact counting, ADAPTIVE drafts, and the Drafter policies."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import recorded_streams

BACKENDS = ["reference", "numba"]


def ngram_counts(seq: list[int], depth: int, start: int = 0) -> Counter:
    """Brute force: occurrences of every n-gram (n <= depth) of ``seq`` ending at >= start."""
    out: Counter = Counter()
    for end in range(start, len(seq)):
        for n in range(1, min(depth, end + 1) + 1):
            out[tuple(seq[end - n + 1:end + 1])] += 1
    return out


def trie_counts(cache: ns.NgramCache) -> Counter:
    """Every root path of the reference trie with its freq (zeros dropped), once the queued
    inserts have run (``finish`` hands its counts to the insert thread)."""
    cache.synchronize()
    out: Counter = Counter()
    stack = [((), cache._backend.trie.root)]
    while stack:
        path, node = stack.pop()
        for tok, child in node.children.items():
            if child.freq:
                out[path + (tok,)] = child.freq
            stack.append((path + (tok,), child))
    return out


@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.data())
def test_exact_counting_counts_each_occurrence_once(seq, data):
    """Counting the n-grams that end at each new chunk, chunk by chunk, gives exactly the
    n-gram counts of the whole sequence (SGLang's window re-insertion would not)."""
    depth = data.draw(st.integers(2, 6))
    cache = ns.NgramCache(max_trie_depth=depth, capacity=10_000, backend="reference")
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(seq)), max_size=6)) + [len(seq)]))
    start = 0
    for end in cuts:
        lo = max(0, start - depth + 1)
        cache.insert([np.asarray(seq[lo:end], np.int32)], count_from=[start - lo])
        start = end
    assert trie_counts(cache) == ngram_counts(seq, depth)


@st.composite
def adaptive_scenarios(draw):
    depth = draw(st.integers(2, 7))
    cfg = dict(max_trie_depth=depth, draft_token_num=draw(st.integers(1, 20)),
               match_type="ADAPTIVE",
               min_token_prob=draw(st.sampled_from([0.0, 0.05, 0.2, 0.5])),
               max_spec_factor=draw(st.sampled_from([0.0, 0.5, 1.0, 3.0])),
               min_expected_accept=draw(st.sampled_from([0.0, 1.5, 2.5])),
               shared_pseudo_count=draw(st.sampled_from([0.0, 0.0, 0.7, 4.0, 10.0])),
               capacity=draw(st.one_of(st.integers(depth + 1, depth + 15),
                                       st.integers(depth + 16, 500))))
    tok = st.integers(-1, draw(st.integers(2, 6)))
    seqs = st.lists(st.lists(tok, max_size=16), min_size=1, max_size=3)
    shared = draw(st.lists(seqs, min_size=1, max_size=4))
    own = draw(st.lists(tok, max_size=30))
    counted_from = draw(st.integers(0, 30))
    contexts = draw(st.lists(st.lists(tok, min_size=1, max_size=depth + 3), min_size=1,
                             max_size=3))
    return cfg, shared, own, counted_from, contexts


@given(adaptive_scenarios())
def test_adaptive_engine_equals_reference(scenario):
    cfg, shared, own, counted_from, contexts = scenario
    out = {}
    for backend in BACKENDS:
        cache = ns.NgramCache(backend=backend, config=ns.NgramConfig(**cfg))
        local = ns.NgramCache(backend=backend, config=ns.NgramConfig(**cfg))
        for batch in shared:
            cache.insert(batch)
        if own:
            local.insert([np.asarray(own, np.int32)], count_from=[min(counted_from, len(own))])
        batch = [np.asarray(c, np.int32) for c in contexts]
        out[backend] = (cache.match(contexts),
                        cache.match(batch, local=[local] * len(batch)))
    for ref, eng in zip(out["reference"], out["numba"]):
        assert_array_equal(eng.tokens, ref.tokens)
        assert_array_equal(eng.mask, ref.mask)
        assert_array_equal(eng.num_drafts, ref.num_drafts)
        assert_array_equal(eng.probs, ref.probs)  # same float operations in the same order


@given(adaptive_scenarios())
def test_adaptive_tree_properties(scenario):
    cfg, shared, _, _, contexts = scenario
    cache = ns.NgramCache(backend="numba", config=ns.NgramConfig(**cfg))
    for batch in shared:
        cache.insert(batch)
    d = cache.match(contexts)
    n = d.draft_token_num
    for b in range(len(contexts)):
        k = int(d.num_drafts[b])
        p = d.probs[b]
        assert p[0] == 1.0 and np.all(p[k + 1:] == 0.0)
        real = p[1:k + 1]
        assert np.all(real > 0) and np.all(real <= 1)
        assert np.all(real >= cfg["min_token_prob"])
        par = d.parents[b]
        assert all(p[i] <= p[par[i]] for i in range(1, k + 1))  # a path only gets less likely
        if k:
            assert d.expected_accept_lens[b] == pytest.approx(1 + real.sum())
            assert d.expected_accept_lens[b] >= cfg["min_expected_accept"]
        if cfg["max_spec_factor"]:
            assert k <= max(1, int(cfg["max_spec_factor"] * min(len(contexts[b]),
                                                               cfg["max_trie_depth"])))
        assert k <= n - 1


def test_adaptive_probabilities_are_conditional_frequencies():
    cache = ns.NgramCache(match_type="ADAPTIVE", draft_token_num=6, capacity=1000)
    cache.insert([[1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 6]])
    d = cache.match([[9, 1, 2]])
    # "1 2" occurs 3 times: followed by 3 twice and 5 once; "1 2 3" by 4 and 6.
    got = {tuple(d.tokens[0, [j for j in range(1, i + 1) if d.mask[0, i, j]]]): d.probs[0, i]
           for i in range(1, int(d.num_drafts[0]) + 1)}
    assert got == {(3,): 2 / 3, (5,): 1 / 3, (3, 4): 1 / 3, (3, 6): 1 / 3, (5, 1): 1 / 3}
    assert d.expected_accept_lens[0] == pytest.approx(1 + 2 / 3 + 4 / 3)
    with pytest.raises(ValueError, match="ADAPTIVE"):
        ns.NgramCache(capacity=100).match([[1]]).expected_accept_lens


def test_options_are_off_by_default_and_checked():
    cfg = ns.NgramConfig()
    assert cfg.sglang_exact
    assert not ns.NgramConfig.recommended().sglang_exact
    with pytest.raises(ValueError, match="only apply to match_type='ADAPTIVE'"):
        ns.NgramConfig(min_token_prob=0.1)
    with pytest.raises(ValueError, match="local_index"):
        ns.NgramConfig(local_index=True)
    with pytest.raises(ValueError, match="profile 'sglang-0.5.23' only"):
        ns.NgramConfig(profile="sglang-0.5.9", exact_counts=True)
    with pytest.raises(ValueError, match="finite number >= 0"):
        ns.NgramConfig(match_type="ADAPTIVE", max_spec_factor=-1)
    with pytest.raises(TypeError, match="must be a bool"):
        ns.NgramConfig(index_prompt="yes")


@pytest.mark.parametrize("cfg", [
    ns.NgramConfig(index_prompt=True, capacity=5_000),
    ns.NgramConfig(exact_counts=True, match_type="PROB", capacity=5_000),
    ns.NgramConfig.recommended(capacity=5_000),
    ns.NgramConfig.recommended(exact_counts=False, capacity=5_000),
    ns.NgramConfig.recommended(min_expected_accept=2.0, capacity=5_000),
], ids=["index_prompt", "exact_prob", "recommended", "local_windows", "draft_nothing"])
def test_drafter_options_same_on_both_backends(cfg):
    from helpers import replay_with_drafter
    rows = recorded_streams(4)
    steps = {be: replay_with_drafter(cfg, rows, 2, be, check=True) for be in BACKENDS}
    assert steps["numba"][0] == steps["reference"][0]
    for a, b in zip(steps["numba"][1], steps["reference"][1]):
        assert_array_equal(a, b)


def test_drafter_index_prompt_inserts_the_prompt():
    prompt = [5, 6, 7, 8, 9, 10]
    for cfg in (ns.NgramConfig(index_prompt=True, capacity=100),
                ns.NgramConfig(index_prompt=True, exact_counts=True, capacity=100)):
        drafter = ns.Drafter(config=cfg, backend="reference")
        drafter.add_request("r", prompt, 5)
        d = drafter.propose(["r"])  # "... 10 5" then "6 7 8" is in the trie at once
        assert d.tokens[0, :4].tolist() == [5, 6, 7, 8]


def test_local_index_feeds_the_shared_trie_at_finish():
    cfg = ns.NgramConfig.recommended(capacity=1000)
    drafter = ns.Drafter(config=cfg, backend="reference")
    drafter.add_request("a", [1, 2, 3, 4], 5)
    drafter.propose(["a"])
    drafter.accept({"a": [6]})
    assert len(drafter.cache) == 1  # nothing shared while the request runs
    drafter.finish("a")
    assert trie_counts(drafter.cache) == ngram_counts([1, 2, 3, 4, 5, 6],
                                                      cfg.max_trie_depth)


@settings(max_examples=20)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=30), st.integers(1, 5))
def test_draft_nothing_below_expected_accept(seq, step):
    cfg = ns.NgramConfig(match_type="ADAPTIVE", min_expected_accept=2.5, capacity=1000)
    cache = ns.NgramCache(config=cfg)
    cache.insert([seq])
    d = cache.match([seq[-step:]])
    free = ns.NgramCache(config=cfg.replace(min_expected_accept=0.0))
    free.insert([seq])
    f = free.match([seq[-step:]])
    if f.expected_accept_lens[0] >= 2.5:
        assert_array_equal(d.tokens, f.tokens)
    else:
        assert d.num_drafts[0] == 0


def test_shared_pseudo_count_discounts_short_shared_contexts():
    """freq / (total + c / n), n = the anchor's length plus the level below it; the request's
    own trie keeps plain frequencies."""
    cfg = dict(match_type="ADAPTIVE", draft_token_num=6, capacity=1000)
    seq = [[1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 6]]
    for backend in BACKENDS:
        cache = ns.NgramCache(config=ns.NgramConfig(**cfg, shared_pseudo_count=2.0),
                              backend=backend)
        cache.insert(seq)
        d = cache.match([[9, 1, 2]])
        got = {tuple(d.tokens[0, [j for j in range(1, i + 1) if d.mask[0, i, j]]]):
               d.probs[0, i] for i in range(1, int(d.num_drafts[0]) + 1)}
        # anchor "1 2" (n = 2): total 3 + 2/2; below "1 2 3" (n = 3): total 2 + 2/3
        assert got == {(3,): 2 / 4, (5,): 1 / 4, (3, 4): 0.5 * 1 / (2 + 2 / 3),
                       (3, 6): 0.5 * 1 / (2 + 2 / 3), (5, 1): 0.25 * 1 / (1 + 2 / 3)}
        own = ns.NgramCache(config=ns.NgramConfig(**cfg), backend=backend)
        own.insert(seq)
        local = cache.match([[9, 1, 2]], local=[own])
        plain = own.match([[9, 1, 2]])
        assert_array_equal(local.tokens, plain.tokens)
        assert_array_equal(local.probs, plain.probs)  # the own trie came first, undiscounted
    with pytest.raises(ValueError, match="only apply to match_type='ADAPTIVE'"):
        ns.NgramConfig(shared_pseudo_count=1.0)
    with pytest.raises(ValueError, match="finite number >= 0"):
        ns.NgramConfig(match_type="ADAPTIVE", shared_pseudo_count=-1.0)


@pytest.mark.parametrize("concurrency", [1, 3])
def test_replay_equals_drafter_with_shared_pseudo_count(concurrency):
    """The engine's compiled replay equals the Drafter replay with the option on (per request
    and step: tokens emitted, real drafts), with and without the request's own trie."""
    from ngramspec.engine.serving.replay import replay
    from ngramspec.simulate import _replay_stepwise
    rows = recorded_streams(8)
    prompts = [np.asarray(r["prompt_ids"][-300:], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"][:200], np.int32) for r in rows]
    ids = [r["id"] for r in rows]
    for cfg in (ns.NgramConfig.recommended(shared_pseudo_count=4.0),
                ns.NgramConfig(match_type="ADAPTIVE", index_prompt=True, exact_counts=True,
                               shared_pseudo_count=10.0, capacity=2_000)):
        got = replay(prompts, outputs, cfg, concurrency=concurrency)
        emitted, drafts, _, steps, _ = _replay_stepwise(prompts, outputs, cfg, concurrency,
                                                        "numba", ids, None)
        for r in range(len(rows)):
            assert_array_equal(got.emitted[r], emitted[r])
            assert_array_equal(got.drafts[r], drafts[r])
        assert got.batch_steps == steps
        off = replay(prompts, outputs, cfg.replace(shared_pseudo_count=0.0),
                     concurrency=concurrency)
        assert any(not np.array_equal(a, b) for a, b in zip(got.drafts, off.drafts))
