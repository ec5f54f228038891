"""Differential tests of external corpora against SGLang 0.5.23's own C++ core (its suffix
automaton, budget split, merge and corpus table), built from the PyPI wheel at test time.

Opt-in: ``python -m pytest -m sglang`` (CI runs it).  Only what SGLang's core and the library
agree to accept is generated: valid budgets, corpora within the token cap, removes of loaded ids.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import peer_fixture, random_ops_vs_peer

from benchmarks.peers import sglang_sam

pytestmark = pytest.mark.sglang


peer_built = peer_fixture(sglang_sam.build)


@st.composite
def configs(draw):
    depth = draw(st.sampled_from([2, 3, 5, 8, 18]))
    lo = draw(st.integers(1, 5))
    draft = draw(st.sampled_from([2, 4, 6, 8, 12, 16]))
    return dict(max_trie_depth=depth, min_bfs_breadth=lo,
                max_bfs_breadth=lo + draw(st.integers(0, 8)), draft_token_num=draft,
                match_type=draw(st.sampled_from(["BFS", "PROB"])),
                capacity=draw(st.sampled_from([depth + 3, 500])),
                external_sam_budget=draw(st.integers(1, draft - 1)))


VOCABS = [(0, 2), (-3, 6), (0, 40), (-(2**31) + 1, 2**31 - 1)]
IDS = ["docs", "wiki", "code", "a", "d", "x", "语料库", "c13", "c14"]


@random_ops_vs_peer(configs(), VOCABS)
def test_random_corpus_ops_equal_sglang(backend, cfg, vocab, data):
    ours = ns.NgramCache(**cfg, backend=backend)
    peer = sglang_sam.SglangSamPeer(**cfg)
    tok = st.integers(*vocab)
    seq = st.lists(tok, min_size=1, max_size=20)
    step = 0
    for _ in range(data.draw(st.integers(1, 14))):
        op = data.draw(st.sampled_from(["insert", "add", "add", "remove", "clear", "match",
                                        "match", "reset", "erase"]))
        if op == "insert":
            batch = data.draw(st.lists(seq, min_size=1, max_size=3))
            ours.insert(batch)
            peer.insert(batch)
        elif op == "add":
            cid = data.draw(st.sampled_from(IDS))
            if cid in ours.corpora():
                continue
            docs = data.draw(st.lists(seq, min_size=1, max_size=4))
            assert ours.add_corpus(cid, docs) == peer.add_corpus(cid, docs)
        elif op == "remove":
            if not ours.corpora():
                continue
            cid = data.draw(st.sampled_from(sorted(ours.corpora())))
            ours.remove_corpus(cid)
            peer.remove_corpus(cid)
        elif op == "clear":
            ours.clear_corpora()
            peer.clear_corpora()
        elif op == "match":
            contexts = data.draw(st.lists(seq, min_size=1, max_size=3))
            ids = [f"r{i}" for i in range(len(contexts))]
            lens = [len(c) + step for c in contexts]
            d = ours.match(contexts, request_ids=ids, total_lens=lens)
            tokens, mask = peer.match(contexts, ids, lens)
            assert_array_equal(d.tokens, tokens)
            assert_array_equal(d.mask, mask)
            step += 1
        elif op == "reset":
            ours.reset()
            peer.reset()
        else:
            ours.erase(["r0"])
            peer.erase(["r0"])
        # The same corpora, listed in the same (libstdc++ string-hash) order.
        assert list(ours.corpora().items()) == list(peer.corpora().items())


def test_many_corpora_rehash_order_equals_sglang():
    """Thirty corpora held at once (13 -> 29 -> 59 buckets), removes and re-adds: the merge
    order, and so the layout, stays SGLang's."""
    cfg = dict(max_trie_depth=4, draft_token_num=32, capacity=100, external_sam_budget=31)
    ours = ns.NgramCache(**cfg)
    peer = sglang_sam.SglangSamPeer(**cfg)
    for i in range(31):
        docs = [[i % 5, (i * 7) % 11, i % 3, 1]]
        ours.add_corpus(f"corpus-{i}", docs)
        peer.add_corpus(f"corpus-{i}", docs)
    for i in range(0, 31, 3):
        ours.remove_corpus(f"corpus-{i}")
        peer.remove_corpus(f"corpus-{i}")
    for i in range(0, 12, 3):
        ours.add_corpus(f"corpus-{i}", [[i, 1]])
        peer.add_corpus(f"corpus-{i}", [[i, 1]])
    assert list(ours.corpora().items()) == list(peer.corpora().items())
    d = ours.match([[0, 1], [3, 1]])
    tokens, mask = peer.match([[0, 1], [3, 1]])
    assert_array_equal(d.tokens, tokens)
    assert_array_equal(d.mask, mask)
