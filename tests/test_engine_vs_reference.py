"""The Numba engine equals the reference model: random scenarios and a stateful machine."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from numpy.testing import assert_array_equal

import ngramspec as ns


@st.composite
def configs(draw, small_capacity=False):
    depth = draw(st.integers(2, 20))
    lo = draw(st.integers(1, 10))
    hi = lo + draw(st.integers(0, 40))
    cap = (draw(st.integers(depth + 1, depth + 30)) if small_capacity
           else draw(st.one_of(st.integers(depth + 1, 3 * depth), st.integers(100, 100_000))))
    return dict(max_trie_depth=depth, min_bfs_breadth=lo, max_bfs_breadth=hi,
                draft_token_num=draw(st.integers(1, 64)),
                match_type=draw(st.sampled_from(["BFS", "PROB"])), capacity=cap)


def vocabularies():
    # Tiny vocabularies make deep, repetitive tries; huge ones with negative ids test hashing.
    return st.sampled_from([(0, 1), (0, 3), (-2, 5), (0, 40), (-(10**6), 10**6),
                            (-(2**31), 2**31 - 1)])


def seqs(vocab, max_len=30, min_len=0):
    lo, hi = vocab
    return st.lists(st.integers(lo, hi), min_size=min_len, max_size=max_len)


def assert_same(a: ns.DraftBatch, b: ns.DraftBatch) -> None:
    assert_array_equal(a.tokens, b.tokens)
    assert_array_equal(a.mask, b.mask)
    assert_array_equal(a.num_drafts, b.num_drafts)


def pair(cfg):
    return ns.NgramCache(**cfg, backend="reference"), ns.NgramCache(**cfg, backend="numba")


@given(configs(), vocabularies(), st.data())
def test_random_scenarios(cfg, vocab, data):
    ref, eng = pair(cfg)
    for _ in range(data.draw(st.integers(1, 8))):
        batch = data.draw(st.lists(seqs(vocab), min_size=1, max_size=4))
        ref.insert(batch)
        eng.insert(batch)
        assert len(ref) == len(eng) <= cfg["capacity"]
        ctxs = data.draw(st.lists(seqs(vocab, cfg["max_trie_depth"] + 4, 1),
                                  min_size=1, max_size=4))
        if data.draw(st.booleans()):
            assert_same(ref.match(ctxs), eng.match(ctxs))
        else:
            ids = [f"r{i}" for i in range(len(ctxs))]
            lens = [len(c) + data.draw(st.integers(0, 3)) for c in ctxs]
            assert_same(ref.match(ctxs, request_ids=ids, total_lens=lens),
                        eng.match(ctxs, request_ids=ids, total_lens=lens))


@given(st.integers(14, 70), st.sampled_from(["BFS", "PROB"]), st.integers(0, 2),
       st.randoms(use_true_random=False))
def test_wide_fanout_rehash_orders(children, match_type, base, rnd):
    """More than 13, 29 or 59 children under one draft-tree node exercise unordered_map rehashes."""
    tokens = rnd.sample(range(-500, 500), children)
    cfg = dict(max_trie_depth=2, min_bfs_breadth=64, max_bfs_breadth=64, draft_token_num=64,
               match_type=match_type, capacity=10_000)
    ref, eng = pair(cfg)
    batch = [[base, t] for t in tokens] + [[base, tokens[0]]] * rnd.randint(0, 3)
    ref.insert(batch)
    eng.insert(batch)
    assert_same(ref.match([[base]]), eng.match([[base]]))
    assert ref.match([[base]]).num_drafts[0] == min(63, children)


class EngineMatchesReference(RuleBasedStateMachine):
    """Insert / match (stateful, reused ids) / erase / reset under heavy eviction."""

    @initialize(cfg=configs(small_capacity=True), vocab=st.sampled_from([(0, 2), (-1, 4), (0, 9)]))
    def setup(self, cfg, vocab):
        self.cfg = cfg
        self.vocab = vocab
        self.ref, self.eng = pair(cfg)
        self.lens: dict[str, int] = {}

    @rule(data=st.data())
    def insert(self, data):
        batch = data.draw(st.lists(seqs(self.vocab, 24), min_size=1, max_size=3))
        self.ref.insert(batch)
        self.eng.insert(batch)

    @rule(data=st.data())
    def match(self, data):
        ids = data.draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3,
                                 unique=True))
        ctxs, lens = [], []
        for rid in ids:
            ctx = data.draw(seqs(self.vocab, self.cfg["max_trie_depth"], 1))
            # Mostly a growing request (as in serving), sometimes a jump or a step back.
            grow = data.draw(st.sampled_from([0, 1, 1, 2, 5, -3]))
            total = max(len(ctx), self.lens.get(rid, 0) + grow)
            self.lens[rid] = total
            ctxs.append(ctx)
            lens.append(total)
        assert_same(self.ref.match(ctxs, request_ids=ids, total_lens=lens),
                    self.eng.match(ctxs, request_ids=ids, total_lens=lens))

    @rule(data=st.data())
    def stateless_match(self, data):
        ctxs = data.draw(st.lists(seqs(self.vocab, self.cfg["max_trie_depth"] + 3, 1),
                                  min_size=1, max_size=3))
        assert_same(self.ref.match(ctxs), self.eng.match(ctxs))

    @rule(ids=st.lists(st.sampled_from(["a", "b", "c", "d", "zz"]), max_size=3))
    def erase(self, ids):
        self.ref.erase(ids)
        self.eng.erase(ids)
        for rid in ids:
            self.lens.pop(rid, None)

    @rule()
    def reset(self):
        self.ref.reset()
        self.eng.reset()
        self.lens.clear()

    @invariant()
    def same_size_within_capacity(self):
        if hasattr(self, "ref"):
            assert len(self.ref) == len(self.eng) <= self.cfg["capacity"]


TestEngineMatchesReference = EngineMatchesReference.TestCase
TestEngineMatchesReference.settings = settings(max_examples=40, stateful_step_count=40,
                                               deadline=None)
