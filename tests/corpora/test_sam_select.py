"""Beyond SGLang: corpora chosen per request (``match(..., corpora=)``), the memory bound per
corpus and the bytes per corpus."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns

BACKENDS = ("numba", "reference")
CORPORA = {"docs": [[1, 2, 3, 9, 9], [7, 1, 2, 5]], "wiki": [[1, 2, 6, 6, 1, 2, 7]],
           "code": [[2, 3, 4, 4], [1, 2, 8]]}


def _cache(backend, names=tuple(CORPORA), **kw):
    params = dict(max_trie_depth=4, max_bfs_breadth=3, draft_token_num=8, capacity=1000,
                  external_sam_budget=6)
    params.update(kw)
    cache = ns.NgramCache(**params, backend=backend)
    cache.insert([[1, 2, 3, 4], [5, 1, 2, 9]])
    for name in names:
        cache.add_corpus(name, CORPORA[name])
    return cache


@st.composite
def selection_case(draw):
    kw = dict(draft_token_num=draw(st.integers(2, 9)),
              match_type=draw(st.sampled_from(["BFS", "PROB"])))
    kw["external_sam_budget"] = draw(st.integers(1, kw["draft_token_num"] - 1))
    contexts = draw(st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=6),
                             min_size=1, max_size=4))
    chosen = draw(st.lists(st.none() | st.sets(st.sampled_from(sorted(CORPORA))),
                           min_size=len(contexts), max_size=len(contexts)))
    return kw, contexts, chosen


@given(selection_case())
@settings(max_examples=80, deadline=None)
def test_a_request_drafts_as_if_only_its_corpora_were_loaded(case):
    """The written rule: request i drafts what the cache would draft with only the corpora of
    corpora[i] loaded (the others removed: the same order among the rest); None = all."""
    kw, contexts, chosen = case
    for backend in BACKENDS:
        got = _cache(backend, **kw).match(contexts, corpora=chosen)
        for i, (ctx, ids) in enumerate(zip(contexts, chosen)):
            alone = _cache(backend, **kw)
            for name in CORPORA:
                if ids is not None and name not in ids:
                    alone.remove_corpus(name)
            want = alone.match([ctx])
            assert_array_equal(got.tokens[i], want.tokens[0])
            assert_array_equal(got.mask[i], want.mask[0])
            assert_array_equal(got.num_drafts[i], want.num_drafts[0])


@given(selection_case(), st.lists(st.integers(0, 9), min_size=1, max_size=3))
@settings(max_examples=40, deadline=None)
def test_stateful_selection_backends_agree(case, more):
    """Stateful matches that change their choice from step to step (the numba backend's
    continued walks must forget a corpus left out): both backends equal."""
    kw, contexts, chosen = case
    caches = [_cache(b, **kw) for b in BACKENDS]
    ids = [f"r{i}" for i in range(len(contexts))]
    seqs = [list(c) for c in contexts]
    for step in range(4):
        pick = chosen if step % 2 == 0 else [None] * len(seqs)
        if step == 3:
            pick = chosen[::-1]
        outs = [c.match([s[-4:] for s in seqs], request_ids=ids,
                        total_lens=[len(s) for s in seqs], corpora=pick) for c in caches]
        assert_array_equal(outs[0].tokens, outs[1].tokens)
        assert_array_equal(outs[0].mask, outs[1].mask)
        assert_array_equal(outs[0].num_drafts, outs[1].num_drafts)
        for s in seqs:
            s.extend(more)


@pytest.mark.parametrize("backend", BACKENDS)
def test_selection_none_is_sglang_and_empty_is_the_trie(backend):
    cache = _cache(backend)
    ctx = [[5, 1, 2], [1, 2]]
    assert_array_equal(cache.match(ctx, corpora=[None, None]).tokens, cache.match(ctx).tokens)
    plain = ns.NgramCache(max_trie_depth=4, max_bfs_breadth=3, draft_token_num=8,
                          capacity=1000, backend=backend)
    plain.insert([[1, 2, 3, 4], [5, 1, 2, 9]])
    assert_array_equal(cache.match(ctx, corpora=[[], ()]).tokens, plain.match(ctx).tokens)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("corpora, exc, match", [
    ([["docs"]], ValueError, "corpora has 1 entries for 2 contexts"),
    ([["docs"], ["nope"]], ValueError, r"corpora\[1\] names 'nope', which is not loaded"),
    ([["docs"], "docs"], TypeError, r"corpora\[1\] must be a collection of corpus ids"),
    ([["docs"], 3], TypeError, r"corpora\[1\] must be a collection"),
    ([["docs"], [["docs"]]], TypeError, r"corpora\[1\] must hold corpus ids \(str\)"),
    ("docs", TypeError, "corpora must be a sequence with one entry per context"),
])
def test_bad_selection_is_refused(backend, corpora, exc, match):
    cache = _cache(backend)
    before = cache.corpora()
    with pytest.raises(exc, match=match):
        cache.match([[1, 2], [2, 3]], corpora=corpora)
    assert cache.corpora() == before


def test_selection_without_corpora_is_refused():
    for mt in ("BFS", "ADAPTIVE"):
        cache = ns.NgramCache(match_type=mt)
        with pytest.raises(ValueError, match="external_sam_budget 0"):
            cache.match([[1, 2]], corpora=[None])


# --- the memory bound and the bytes per corpus ---------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_corpus_info_reports_tokens_and_the_same_bytes_on_both_backends(backend):
    cache = _cache(backend)
    info = cache.corpus_info()
    assert list(info) == list(cache.corpora())
    assert {c: v["tokens"] for c, v in info.items()} == cache.corpora()
    numba = _cache("numba").corpus_info()
    assert info == numba
    # The bytes are the flat arrays' own size and the stream kept for saving.
    flat = _cache("numba")._corpora.automata["docs"]
    assert info["docs"]["bytes"] == sum(a.nbytes for a in flat.arrays()[:8]) + 4 * 10


@given(st.lists(st.lists(st.integers(-3, 5), min_size=1, max_size=20), min_size=1, max_size=4))
@settings(max_examples=60, deadline=None)
def test_bytes_lower_bound_and_backends(docs):
    """Both backends count the same bytes, never below the bound used to refuse early."""
    from ngramspec.cache.corpora import automaton_bytes, corpus_stream

    sizes = []
    for backend in BACKENDS:
        cache = ns.NgramCache(draft_token_num=4, external_sam_budget=2, backend=backend)
        total = cache.add_corpus("c", docs)
        sizes.append(cache.corpus_info()["c"]["bytes"])
    assert sizes[0] == sizes[1]
    assert sizes[0] >= automaton_bytes(total + 1, total) + 4 * total
    assert total == corpus_stream(docs).size


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_bytes_refuses_a_corpus_over_it_and_changes_nothing(backend):
    cache = _cache(backend, names=("wiki",))
    need = _cache(backend, names=("docs",)).corpus_info()["docs"]["bytes"]
    before = (cache.corpus_info(), cache.match([[1, 2]]).tokens.tolist())
    # Just below: refused after the build; far below: refused before building.
    for bound in (need - 1, 100):
        with pytest.raises(ValueError, match=r"corpus 'docs' would take .* bytes, more than "
                                             rf"max_bytes \({bound}\); nothing loaded"):
            cache.add_corpus("docs", CORPORA["docs"], max_bytes=bound)
        assert (cache.corpus_info(), cache.match([[1, 2]]).tokens.tolist()) == before
    assert cache.add_corpus("docs", CORPORA["docs"], max_bytes=need) == 10
    assert cache.corpus_info()["docs"]["bytes"] == need
    for bad in (0, -5, 1.5, True, "10"):
        with pytest.raises(ValueError, match="max_bytes must be a positive int"):
            cache.add_corpus("other", [[1]], max_bytes=bad)
    assert "other" not in cache.corpora()
