"""External corpora: the string-hash corpus order against the spec's vectors, the reference
automaton against brute force, the Numba automaton against the reference (Hypothesis), and
bad input (a clear error, nothing changed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ngramspec as ns
from ngramspec.config import NgramConfig
from ngramspec.cache.corpora import SEPARATOR, CorpusOrder, corpus_stream, string_hash
from ngramspec.engine.corpora.sam import FlatAutomaton
from ngramspec.reference.sam import SuffixAutomaton

BACKENDS = ["reference", "numba"]


# --- libstdc++ std::hash<std::string> and unordered_map<std::string> order (spec §3.6.9) ----

@pytest.mark.parametrize("key, expected", [
    ("", 6142509188972423790), ("a", 4993892634952068459), ("b", 10838281452030117757),
    ("d", 14494284460613645429), ("wiki", 13728459620153269800),
    ("docs", 10897595616481244391), ("code", 8914303621330222732),
    ("abcdefgh", 8664279048047335611), ("abcdefghi", 13036955925923793583),
    ("语料库", 1846409807468961218),
])
def test_string_hash_spec_vectors(key, expected):
    assert string_hash(key) == expected


def test_corpus_order_spec_examples():
    order = CorpusOrder()
    for cid in ["docs", "wiki", "code"]:
        order.insert(cid)
    assert order.bucket_count == 13
    assert list(order) == ["wiki", "code", "docs"]
    order.erase("docs")
    order.insert("docs")
    assert list(order) == ["wiki", "docs", "code"]
    # Example 5: "a" and "d" share bucket 1 of 13.
    order = CorpusOrder()
    for cid in ["a", "d", "x"]:
        order.insert(cid)
    assert list(order) == ["x", "d", "a"]


def test_corpus_order_bucket_growth_and_clear():
    order = CorpusOrder()
    counts = []
    for i in range(130):
        order.insert(f"c{i}")
        counts.append(order.bucket_count)
    # 13 at the first insert, 29 at the 14th, 59 at the 30th, 127 at the 60th, 257 at the 128th.
    assert [counts[i] for i in (0, 12, 13, 28, 29, 58, 59, 126, 127)] == [
        13, 13, 29, 29, 59, 59, 127, 127, 257]
    order.clear()
    order.insert("docs")
    assert (order.bucket_count, list(order)) == (257, ["docs"])


def test_corpus_stream_joins_non_empty_documents():
    assert corpus_stream([[], [1, 2], [], [3], np.array([], np.int64)]).tolist() == [
        1, 2, SEPARATOR, 3]
    assert corpus_stream([]).size == 0


# --- the reference automaton against brute force -------------------------------------------

docs_st = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=12), min_size=1, max_size=4)


@given(docs_st)
def test_reference_counts_and_last_ends_are_brute_force(docs):
    stream = corpus_stream(docs).tolist()
    if not stream:
        return
    sam = SuffixAutomaton.build(stream)
    seen = {}
    for i in range(len(stream)):
        for j in range(i + 1, min(len(stream), i + 6) + 1):
            w = tuple(stream[i:j])
            if SEPARATOR in w:
                break
            count, last = seen.get(w, (0, -1))
            seen[w] = (count + 1, max(last, j - 1))
    for w, (count, last) in seen.items():
        s = sam.states[sam.walk(w)]
        assert (s.occ, s.last_end) == (count, last)
        follow = {stream[i + len(w)] for i in range(len(stream) - len(w))
                  if tuple(stream[i:i + len(w)]) == w and stream[i + len(w)] != SEPARATOR}
        assert {c.token for c in s.by_freq} == follow


# --- Numba automaton == reference automaton ------------------------------------------------

@st.composite
def corpus_case(draw):
    vocab = draw(st.sampled_from([2, 3, 5, 40]))
    tok = st.one_of(st.integers(0, vocab - 1), st.sampled_from([-5, 2**31 - 1, -(2**31) + 1]))
    docs = draw(st.lists(st.lists(tok, min_size=1, max_size=30), min_size=1, max_size=4))
    contexts = draw(st.lists(st.lists(st.one_of(tok, st.just(SEPARATOR)), min_size=1,
                                      max_size=10), min_size=1, max_size=4))
    depth = draw(st.integers(2, 8))
    lo = draw(st.integers(1, 4))
    hi = draw(st.integers(lo, 6))
    budget = draw(st.integers(1, 14))
    return docs, contexts, depth, lo, hi, budget


@pytest.mark.parametrize("prob", [False, True])
@given(case=corpus_case())
def test_flat_automaton_drafts_equal_reference(prob, case):
    docs, contexts, depth, lo, hi, budget = case
    stream = corpus_stream(docs)
    ref = SuffixAutomaton.build(stream.tolist())
    flat = FlatAutomaton.build(stream, prob=prob)
    ctx = [np.asarray(c, np.int32) for c in contexts]
    kw = dict(max_depth=depth, min_breadth=lo, max_breadth=hi, prob=prob)
    r_tok, r_mask = ref.draft_batch(ctx, budget, **kw)
    f_tok, f_mask = flat.draft_batch(ctx, budget, **kw)
    np.testing.assert_array_equal(f_tok, r_tok)
    np.testing.assert_array_equal(f_mask, r_mask)
    assert flat.n_states == len(ref.states)


@st.composite
def cache_case(draw):
    vocab = draw(st.sampled_from([2, 3, 6, 30]))
    tok = st.integers(0, vocab - 1)
    draft = draw(st.integers(2, 12))
    lo = draw(st.integers(1, 3))
    params = dict(max_trie_depth=draw(st.integers(2, 6)), min_bfs_breadth=lo,
                  max_bfs_breadth=draw(st.integers(lo, 6)), draft_token_num=draft,
                  match_type=draw(st.sampled_from(["BFS", "PROB"])), capacity=200,
                  external_sam_budget=draw(st.integers(1, draft - 1)),
                  external_corpus_max_tokens=draw(st.sampled_from([40, 1000])))
    ops = draw(st.lists(st.one_of(
        st.tuples(st.just("insert"), st.lists(st.lists(tok, min_size=1, max_size=10),
                                              min_size=1, max_size=3)),
        st.tuples(st.just("add"), st.sampled_from("abcdefg"),
                  st.lists(st.lists(tok, max_size=15), max_size=3)),
        st.tuples(st.just("add"), st.sampled_from("abcdefg"),
                  st.lists(st.lists(tok, min_size=5, max_size=15), min_size=1, max_size=3)),
        st.tuples(st.just("remove"), st.sampled_from("abcdefg")),
        st.tuples(st.just("match"), st.lists(st.lists(tok, min_size=1, max_size=8),
                                             min_size=1, max_size=3)),
        st.tuples(st.just("match"), st.lists(st.lists(tok, min_size=1, max_size=8),
                                             min_size=1, max_size=3)),
        st.tuples(st.just("reset")), st.tuples(st.just("clear"))), min_size=1, max_size=16))
    return params, ops


@given(cache_case())
@settings(max_examples=60)
def test_cache_with_corpora_backends_agree(case):
    """Random inserts, corpus adds/removes/clears, resets and stateful matches: both
    backends give the same drafts, counts, corpus listings and errors."""
    params, ops = case
    caches = [ns.NgramCache(**params, backend=b) for b in BACKENDS]
    step = 0
    for op in ops:
        outcomes = []
        for cache in caches:
            try:
                if op[0] == "insert":
                    outcomes.append(cache.insert(op[1]))
                elif op[0] == "add":
                    outcomes.append(cache.add_corpus(op[1], op[2]))
                elif op[0] == "remove":
                    outcomes.append(cache.remove_corpus(op[1]))
                elif op[0] == "reset":
                    outcomes.append(cache.reset())
                elif op[0] == "clear":
                    outcomes.append(cache.clear_corpora())
                else:
                    ids = [f"r{i}" for i in range(len(op[1]))]
                    d = cache.match(op[1], request_ids=ids,
                                    total_lens=[len(c) + step for c in op[1]])
                    outcomes.append((d.tokens.tolist(), d.mask.tolist(),
                                     d.num_drafts.tolist()))
            except (ValueError, KeyError) as e:
                outcomes.append((type(e).__name__, str(e)))
            outcomes.append(list(cache.corpora().items()))
        assert outcomes[:2] == outcomes[2:]
        step += 1


# --- the cache's corpus API ----------------------------------------------------------------

def _cache(backend, **kw):
    params = dict(max_trie_depth=4, max_bfs_breadth=3, draft_token_num=6, capacity=1000,
                  external_sam_budget=2, external_corpus_max_tokens=20)
    params.update(kw)
    return ns.NgramCache(**params, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_corpora_off_by_default_and_reset_keeps_them(backend):
    plain = ns.NgramCache(max_trie_depth=4, draft_token_num=6, capacity=1000, backend=backend)
    assert plain.config.external_sam_budget == 0 and plain.corpora() == {}
    cache = _cache(backend)
    cache.insert([[1, 2, 3, 4]])
    assert cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]]) == 10
    before = cache.match([[1, 2]]).tokens
    cache.reset()
    assert cache.corpora() == {"docs": 10}
    cache.insert([[1, 2, 3, 4]])
    np.testing.assert_array_equal(cache.match([[1, 2]]).tokens, before)
    cache.clear_corpora()
    assert cache.corpora() == {}
    np.testing.assert_array_equal(cache.match([[1, 2]]).tokens, [[2, 3, 4, 0, 0, 0]])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("call, exc, match", [
    (lambda c: c.add_corpus("docs", [[5]]), ValueError, "already loaded"),
    (lambda c: c.remove_corpus("nope"), KeyError, "no corpus 'nope' is loaded"),
    (lambda c: c.add_corpus("e", []), ValueError, "has no tokens"),
    (lambda c: c.add_corpus("e", [[], []]), ValueError, "has no tokens"),
    (lambda c: c.add_corpus("e", [[1, 2**31]]), ValueError, "outside int32"),
    (lambda c: c.add_corpus("e", [np.array([1, -(2**31) - 1], np.int64)]), ValueError,
     "outside int32"),
    (lambda c: c.add_corpus("e", [[1, 2**70]]), ValueError, "outside int32"),
    (lambda c: c.add_corpus("e", [[1, SEPARATOR, 2]]), ValueError, "document separator"),
    (lambda c: c.add_corpus("e", [list(range(21))]), ValueError,
     "more than external_corpus_max_tokens"),
    (lambda c: c.add_corpus("e", [list(range(11))]), ValueError, "only 10 of"),
    (lambda c: c.add_corpus("", [[1]]), ValueError, "non-empty"),
    (lambda c: c.add_corpus("a\ud800", [[1]]), ValueError, "lone surrogate"),
    (lambda c: c.add_corpus("e", {"x": [1]}), TypeError, r"documents\[0\]"),
    (lambda c: c.add_corpus("e", [np.array([1, 2], np.uint64) + 2**40]), ValueError,
     "outside int32"),
    (lambda c: c.add_corpus(3, [[1]]), TypeError, "corpus_id must be a str"),
    (lambda c: c.add_corpus("e", [1, 2, 3]), TypeError, "flat sequence of ints"),
    (lambda c: c.add_corpus("e", ["text"]), TypeError, r"documents\[0\]"),
    (lambda c: c.add_corpus("e", [[1.5]]), TypeError, "integer token ids"),
    (lambda c: c.add_corpus("e", [[True]]), TypeError, "integer token ids"),
    (lambda c: c.add_corpus("e", 5), TypeError, "iterable"),
    (lambda c: c.remove_corpus(None), TypeError, "corpus_id must be a str"),
])
def test_bad_corpus_input_is_refused_and_changes_nothing(backend, call, exc, match):
    cache = _cache(backend)
    cache.insert([[1, 2, 3, 4]])
    cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]])
    before = (cache.corpora(), cache.match([[1, 2]]).tokens.tolist())
    with pytest.raises(exc, match=match):
        call(cache)
    assert (cache.corpora(), cache.match([[1, 2]]).tokens.tolist()) == before


@pytest.mark.parametrize("kw, match", [
    (dict(external_sam_budget=6), r"external_sam_budget must be in \[0, draft_token_num - 1"),
    (dict(external_sam_budget=-1), r"external_sam_budget must be in"),
    (dict(external_corpus_max_tokens=0), "external_corpus_max_tokens must be in"),
    (dict(external_corpus_max_tokens=2**29 + 1), r"external_corpus_max_tokens must be in \[1, "),
    (dict(external_sam_budget=2, match_type="ADAPTIVE"), "match_type 'BFS' or 'PROB' only"),
])
def test_bad_corpus_settings(kw, match):
    params = dict(max_trie_depth=4, draft_token_num=6, capacity=1000)
    params.update(kw)
    with pytest.raises(ValueError, match=match):
        NgramConfig(**params)


def test_bad_corpus_settings_types_and_profile():
    with pytest.raises(TypeError, match="external_sam_budget must be an integer"):
        NgramConfig(external_sam_budget=1.5)
    with pytest.raises(ValueError, match="profile 'sglang-0.5.23'"):
        NgramConfig(profile="sglang-0.5.9", external_sam_budget=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adding_a_corpus_with_budget_zero_is_refused(backend):
    cache = _cache(backend, external_sam_budget=0)
    with pytest.raises(ValueError, match="external_sam_budget is 0"):
        cache.add_corpus("docs", [[1, 2]])
    assert cache.corpora() == {}


def test_from_sglang_args_corpus_arguments():
    cfg = NgramConfig.from_sglang_args({
        "--speculative-ngram-external-sam-budget": 4,
        "--speculative-ngram-external-corpus-max-tokens": 5000,
        "--speculative-ngram-external-corpus-path": "corpus.jsonl"})
    assert (cfg.external_sam_budget, cfg.external_corpus_max_tokens) == (4, 5000)
    with pytest.raises(ValueError, match="external_corpus_max_tokens must be in"):
        NgramConfig.from_sglang_args({"speculative_ngram_external_sam_budget": 4,
                                      "speculative_ngram_external_corpus_max_tokens": 0})
    with pytest.raises(TypeError, match="must be a path"):
        NgramConfig.from_sglang_args({"speculative_ngram_external_sam_budget": 4,
                                      "speculative_ngram_external_corpus_path": 3})


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_corpus_budget_zero_leaves_the_trie_alone(backend):
    """Budget 2 and three corpora: 2 // 3 = 0 per corpus, the trie gets the whole budget
    (spec §3.6.7, example 5)."""
    cache = ns.NgramCache(max_trie_depth=3, max_bfs_breadth=5, draft_token_num=5,
                          capacity=100, external_sam_budget=2, backend=backend)
    cache.insert([[1, 2], [1, 3], [1, 4]])
    plain = cache.match([[1]]).tokens.tolist()
    for cid, doc in [("a", [7, 8]), ("d", [9, 9]), ("x", [5])]:
        cache.add_corpus(cid, [doc])
    assert list(cache.corpora()) == ["x", "d", "a"]
    assert cache.match([[1]]).tokens.tolist() == plain == [[1, 2, 3, 4, 0]]


@pytest.mark.parametrize("name", ["ngramspec.cache.corpora", "ngramspec.reference.sam",
                                  "ngramspec.engine.corpora.sam"])
def test_corpus_module_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name),
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0


def test_docs_corpora_example_runs_and_prints_what_it_says():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "corpora.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    lines = block.splitlines()
    scope: dict = {}
    checked = 0
    pending = ""
    for line in lines:
        code, _, comment = line.partition("#")
        pending += code + "\n"
        try:
            compiled = compile(pending, "docs/corpora.md", "exec")
        except SyntaxError:
            continue  # a statement over several lines
        pending = ""
        exec(compiled, scope)
        value = comment.strip()
        if code.strip().startswith("cache.match"):
            assert str(scope["cache"].match([[1, 2]]).tokens.tolist()) == value
            checked += 1
        elif code.strip() == "cache.corpora()":
            assert value.startswith(str(scope["cache"].corpora()))
            checked += 1
    assert checked == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_from_sglang_args_loads_the_corpus_path(backend, tmp_path):
    from ngramspec.cache import cache_from_sglang_args

    path = tmp_path / "c.jsonl"
    path.write_text("[1, 2, 3, 9, 9]\n[7, 1, 2, 5]\n")
    args = {"--speculative-ngram-max-trie-depth": 4, "--speculative-num-draft-tokens": 6,
            "--speculative-ngram-max-bfs-breadth": 3,
            "--speculative-ngram-external-sam-budget": 2,
            "--speculative-ngram-external-corpus-path": str(path)}
    cache = cache_from_sglang_args(args, backend=backend)
    assert cache.corpora() == {str(path): 10}
    cache.insert([[1, 2, 3, 4]])
    assert cache.match([[1, 2]]).tokens.tolist() == [[2, 5, 3, 4, 0, 0]]
    # As SGLang's start-up reader: a file over the cap is refused whole.
    with pytest.raises(ValueError, match="more than external_corpus_max_tokens"):
        cache_from_sglang_args({**args, "speculative_ngram_external_corpus_max_tokens": 9},
                               backend=backend)
    path.write_text('"some text"\n')
    with pytest.raises(ValueError, match="pass a tokenizer"):
        cache_from_sglang_args(args, backend=backend)
    assert cache_from_sglang_args({**args, "speculative_ngram_external_corpus_path": None},
                                  backend=backend).corpora() == {}


@pytest.mark.parametrize("prob", [False, True])
def test_flat_automaton_wide_states_equal_reference(prob):
    """States with more children than the in-place sort handles (a sort by argsort)."""
    rng = np.random.default_rng(7)
    docs = [[5, int(t), int(u)] for t, u in rng.integers(-40, 60, size=(300, 2))]
    stream = corpus_stream(docs)
    ref = SuffixAutomaton.build(stream.tolist())
    flat = FlatAutomaton.build(stream, prob=prob)
    ctx = [np.asarray([5], np.int32), np.asarray([9, 5], np.int32), np.asarray([3], np.int32)]
    kw = dict(max_depth=4, min_breadth=2, max_breadth=40, prob=prob)
    r_tok, r_mask = ref.draft_batch(ctx, 30, **kw)
    f_tok, f_mask = flat.draft_batch(ctx, 30, **kw)
    np.testing.assert_array_equal(f_tok, r_tok)
    np.testing.assert_array_equal(f_mask, r_mask)
    assert flat.max_kids > 16


@pytest.mark.parametrize("backend", BACKENDS)
def test_warmup_with_corpora_leaves_the_cache_alone(backend):
    cache = _cache(backend)
    cache.add_corpus("docs", [[1, 2, 3]])
    assert cache.warmup() is cache
    assert cache.corpora() == {"docs": 3}


@pytest.mark.parametrize("backend", BACKENDS)
def test_corpus_changes_and_matches_from_threads(backend):
    """A match sees a corpus entirely or not at all: while another thread adds and removes
    it, every draft equals the one without it or the one with it."""
    import threading

    cache = _cache(backend)
    cache.insert([[1, 2, 3, 4]])
    without = cache.match([[1, 2]]).tokens.tolist()
    cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]])
    with_ = cache.match([[1, 2]]).tokens.tolist()
    cache.remove_corpus("docs")
    assert without != with_
    seen, stop = [], threading.Event()

    def flip():
        while not stop.is_set():
            cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]])
            cache.remove_corpus("docs")

    worker = threading.Thread(target=flip)
    worker.start()
    try:
        for _ in range(200):
            seen.append(cache.match([[1, 2]]).tokens.tolist())
    finally:
        stop.set()
        worker.join()
    assert {str(s) for s in seen} <= {str(without), str(with_)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_save_keeps_the_settings_and_the_corpora(backend, tmp_path):
    cache = _cache(backend)
    cache.insert([[1, 2, 3, 4]])
    cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]])
    cache.save(tmp_path / "c.npz")
    loaded = ns.NgramCache.load(tmp_path / "c.npz")
    assert loaded.config == cache.config and loaded.corpora() == {"docs": 10}
    assert loaded.match([[1, 2]]).tokens.tolist() == cache.match([[1, 2]]).tokens.tolist()
