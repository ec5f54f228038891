"""Profile sglang-0.5.9: the Numba engine equals the reference model (random scenarios, wide
fan-outs, a stateful insert/match/reset machine under heavy eviction) and matching depends only
on the last ``max_match_window_size`` tokens."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from test_engine_vs_reference import assert_same, pair, seqs, vocabularies

PROFILE = "sglang-0.5.9"


@st.composite
def legacy_configs(draw, small_capacity=False):
    branch = draw(st.integers(2, 20))
    max_w = draw(st.integers(1, branch - 1))
    min_w = draw(st.integers(1, max_w))
    lo = draw(st.integers(1, 10))
    hi = lo + draw(st.integers(0, 40))
    cap = (draw(st.integers(branch + 1, branch + 30)) if small_capacity
           else draw(st.one_of(st.integers(branch + 1, 3 * branch), st.integers(100, 100_000))))
    return dict(profile=PROFILE, branch_length=branch, min_match_window_size=min_w,
                max_match_window_size=max_w, min_bfs_breadth=lo, max_bfs_breadth=hi,
                draft_token_num=draw(st.integers(1, 64)),
                match_type=draw(st.sampled_from(["BFS", "PROB"])), capacity=cap)


@given(legacy_configs(), vocabularies(), st.data())
def test_random_scenarios(cfg, vocab, data):
    ref, eng = pair(cfg)
    for _ in range(data.draw(st.integers(1, 8))):
        batch = data.draw(st.lists(seqs(vocab), min_size=1, max_size=4))
        ref.insert(batch)
        eng.insert(batch)
        assert len(ref) == len(eng) <= cfg["capacity"]
        ctxs = data.draw(st.lists(seqs(vocab, cfg["branch_length"] + 4, 1),
                                  min_size=1, max_size=4))
        assert_same(ref.match(ctxs), eng.match(ctxs))


@given(legacy_configs(), st.sampled_from([(0, 1), (0, 3), (-2, 5)]), st.data())
def test_only_the_last_max_window_tokens_matter(cfg, vocab, data):
    """0.5.9 anchors are the suffixes of at most max_match_window_size tokens, and stateless."""
    ref, eng = pair(cfg)
    batch = data.draw(st.lists(seqs(vocab, 40), min_size=1, max_size=4))
    ref.insert(batch)
    eng.insert(batch)
    ctx = data.draw(seqs(vocab, 30, 1))
    tail = ctx[-cfg["max_match_window_size"]:]
    for cache in (ref, eng):
        full = cache.match([ctx], request_ids=["r"], total_lens=[len(ctx) + 5])
        assert_same(full, cache.match([tail]))
        assert_same(full, cache.match([ctx]))


@given(st.integers(14, 70), st.sampled_from(["BFS", "PROB"]), st.integers(0, 2),
       st.randoms(use_true_random=False))
def test_wide_fanout_rehash_orders(children, match_type, base, rnd):
    """More than 13, 29 or 59 children under one draft-tree node exercise unordered_map rehashes."""
    tokens = rnd.sample(range(-500, 500), children)
    cfg = dict(profile=PROFILE, branch_length=3, min_match_window_size=1,
               max_match_window_size=2, min_bfs_breadth=64, max_bfs_breadth=64,
               draft_token_num=64, match_type=match_type, capacity=10_000)
    ref, eng = pair(cfg)
    # The trailing 0 keeps [base, t] a full suffix path (0.5.9 skips the last min_w starts).
    batch = [[base, t, 0] for t in tokens] + [[base, tokens[0], 0]] * rnd.randint(0, 3)
    ref.insert(batch)
    eng.insert(batch)
    assert_same(ref.match([[base]]), eng.match([[base]]))
    assert ref.match([[base]]).num_drafts[0] >= min(63, children)


class LegacyEngineMatchesReference(RuleBasedStateMachine):
    """Insert / match / reset under heavy eviction, profile sglang-0.5.9."""

    @initialize(cfg=legacy_configs(small_capacity=True),
                vocab=st.sampled_from([(0, 2), (-1, 4), (0, 9)]))
    def setup(self, cfg, vocab):
        self.cfg = cfg
        self.vocab = vocab
        self.ref, self.eng = pair(cfg)

    @rule(data=st.data())
    def insert(self, data):
        batch = data.draw(st.lists(seqs(self.vocab, 24), min_size=1, max_size=3))
        self.ref.insert(batch)
        self.eng.insert(batch)

    @rule(data=st.data())
    def match(self, data):
        ctxs = data.draw(st.lists(seqs(self.vocab, self.cfg["max_match_window_size"] + 3, 1),
                                  min_size=1, max_size=3))
        assert_same(self.ref.match(ctxs), self.eng.match(ctxs))

    @rule()
    def reset(self):
        self.ref.reset()
        self.eng.reset()

    @invariant()
    def same_size_within_capacity(self):
        if hasattr(self, "ref"):
            assert len(self.ref) == len(self.eng) <= self.cfg["capacity"]


TestLegacyEngineMatchesReference = LegacyEngineMatchesReference.TestCase
TestLegacyEngineMatchesReference.settings = settings(max_examples=40, stateful_step_count=40,
                                                     deadline=None)
