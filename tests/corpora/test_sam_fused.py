"""The fused corpus match (one kernel call for the trie, the corpora and the merge) and its
continued corpus walks: equal to the reference backend, which walks every window afresh as
SGLang does, on request streams built to reuse, nearly reuse and wrongly claim to reuse the
last walk of a match-state row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ngramspec as ns

SEP = -(2**31)


@st.composite
def stream_case(draw):
    depth = draw(st.integers(2, 6))
    params = dict(max_trie_depth=depth, min_bfs_breadth=draw(st.integers(1, 2)),
                  max_bfs_breadth=draw(st.integers(2, 4)), draft_token_num=draw(st.integers(3, 9)),
                  match_type=draw(st.sampled_from(["BFS", "PROB"])), capacity=400)
    params["external_sam_budget"] = draw(st.integers(1, params["draft_token_num"] - 1))
    tok = st.integers(0, 4) | st.sampled_from([SEP, -3, 2**31 - 1])
    corpora = draw(st.lists(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=12),
                                     min_size=1, max_size=3), min_size=1, max_size=3))
    ops = []
    n_req = draw(st.integers(1, 3))
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["grow", "grow", "grow", "lie", "short", "erase", "insert",
                                     "add", "stateless"]))
        req = draw(st.integers(0, n_req - 1))
        if kind in ("grow", "lie", "short"):
            ops.append((kind, req, draw(st.lists(tok, min_size=0, max_size=4)),
                        draw(st.integers(1, depth + 2)), draw(st.integers(-2, 2))))
        elif kind == "insert":
            ops.append((kind, draw(st.lists(st.integers(0, 4), min_size=1, max_size=8))))
        elif kind == "add":
            ops.append((kind, draw(st.lists(st.lists(st.integers(0, 4), min_size=1,
                                                     max_size=8), min_size=1, max_size=2))))
        else:
            ops.append((kind, req))
    return params, corpora, n_req, ops


def _run(case, backend, serving=False):
    """The drafts of ``case``'s operations; ``serving``: stateful contexts sent as a server
    sends them (int32 arrays, plain ids and lengths), the path into the output pool."""
    params, corpora, n_req, ops = case
    cache = ns.NgramCache(**params, backend=backend)
    for i, docs in enumerate(corpora):
        cache.add_corpus(f"c{i}", docs)
    seqs = [[1] for _ in range(n_req)]
    out = []
    added = 0
    for op in ops:
        kind = op[0]
        if kind == "insert":
            cache.insert([op[1]])
            continue
        if kind == "add":
            added += 1
            cache.add_corpus(f"new{added}", op[1])
            continue
        req = op[1]
        if kind == "erase":
            cache.erase([f"r{req}"])
            continue
        if kind == "stateless":
            d = cache.match([seqs[req][-params["max_trie_depth"]:]])
            out.append((d.tokens.tolist(), d.mask.tolist(), d.num_drafts.tolist()))
            continue
        _, req, more, width, skew = op
        seq = seqs[req]
        if kind == "lie":  # the window changes where the total length says nothing did
            seq = seq[:-1] + [(seq[-1] + 1) % 5] if len(seq) > 1 else seq
            seqs[req] = seq
        seq += more
        ctx = seq[-width:] if kind != "short" else seq[-1:]
        total = len(seq) + (skew if kind == "lie" else 0)
        if serving:
            ctx = np.asarray(ctx, np.int32)
        d = cache.match([ctx], request_ids=[f"r{req}"], total_lens=[max(total, len(ctx))])
        out.append((d.tokens.tolist(), d.mask.tolist(), d.num_drafts.tolist()))
    return out


@given(stream_case())
@settings(max_examples=150, deadline=None)
def test_continued_walks_equal_fresh_walks(case):
    """Numba (fused kernel, walks continued per row) = reference (fresh walks), step by
    step, on growing, shortened, erased and misreported requests."""
    assert _run(case, "numba") == _run(case, "reference")


@given(stream_case())
@settings(max_examples=100, deadline=None)
def test_serving_calls_equal_the_reference(case):
    """Batch 1 as a server sends it (the pooled corpus kernel) = reference, step by step."""
    assert _run(case, "numba", serving=True) == _run(case, "reference")


def _twin_caches(rng, match_type):
    """A random two-document corpus and a numba and a reference cache of the same settings."""
    corpus = [rng.integers(0, 6, 300).tolist(), rng.integers(0, 6, 200).tolist()]
    kw = dict(max_trie_depth=5, max_bfs_breadth=3, draft_token_num=8, capacity=5000,
              match_type=match_type, external_sam_budget=4)
    return corpus, [ns.NgramCache(**kw, backend=b) for b in ("numba", "reference")]


def _assert_same(da, db):
    np.testing.assert_array_equal(da.tokens, db.tokens)
    np.testing.assert_array_equal(da.mask, db.mask)
    np.testing.assert_array_equal(da.num_drafts, db.num_drafts)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_serving_calls_across_growth_and_corpus_changes(match_type, batch):
    """40 requests in turn (the match states and corpus walks grow past their first size), a
    corpus added and one removed midway: the pooled corpus kernel's drafts, batch 1 and
    packed batches, equal the reference's at every step, and earlier results keep theirs."""
    rng = np.random.default_rng(11)
    corpus, caches = _twin_caches(rng, match_type)
    for c in caches:
        c.add_corpus("x", corpus)
    seqs = {f"r{i}": [i % 6] for i in range(40)}
    ids = list(seqs)
    kept = []
    for step in range(120):
        if step == 40:
            for c in caches:
                c.add_corpus("y", corpus[:1])
        if step == 80:
            for c in caches:
                c.remove_corpus("x")
        chosen = [ids[(step * batch + j) % len(ids)] for j in range(batch)]
        for rid in chosen:
            seqs[rid] += rng.integers(0, 6, int(rng.integers(1, 4))).tolist()
        ctxs = [np.asarray(seqs[rid][-5:], np.int32) for rid in chosen]
        lens = [len(seqs[rid]) for rid in chosen]
        da, db = (c.match(ctxs, request_ids=chosen, total_lens=lens) for c in caches)
        _assert_same(da, db)
        kept.append((da, db.tokens.copy()))
        for c in caches:
            c.insert([seqs[rid][-8:] for rid in chosen])
    for da, tokens in kept:
        np.testing.assert_array_equal(da.tokens, tokens)


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_continued_walks_on_a_long_stream(match_type):
    """A long request whose window slides by 1-3 tokens per step, beside a second request:
    every stateful draft of the numba backend (continued walks) equals the reference's."""
    rng = np.random.default_rng(7)
    corpus, caches = _twin_caches(rng, match_type)
    for c in caches:
        c.add_corpus("x", corpus)
        c.add_corpus("y", corpus[:1])
    seqs = [[0], [1, 2]]
    for step in range(300):
        for s in seqs:
            s += rng.integers(0, 6, int(rng.integers(1, 4))).tolist()
        ctxs = [np.asarray(s[-5:], np.int32) for s in seqs]
        lens = [len(s) for s in seqs]
        da, db = (c.match(ctxs, request_ids=["p", "q"], total_lens=lens) for c in caches)
        _assert_same(da, db)
        for c in caches:
            c.insert([s[-8:] for s in seqs])
