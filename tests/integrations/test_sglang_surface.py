"""The whole public surface of SGLang's drafter classes on ngramspec's drop-ins: the debugging
helpers ``leaf_paths_from_mask`` and ``debug_result`` of SGLang 0.5.23's ``NgramCorpus`` and
0.5.9's ``NgramCache``, and every public name of both classes.

Without SGLang: the helpers' exact results on hand-built trees, each expected value derived
from SGLang's documented rule (a mask row is a leaf unless a *later* row marks every column it
marks; a leaf's path is the tokens of its marked columns, in column order; leaves in row
order; only the value 1 marks).  Under the ``sglang`` marker: the same calls on SGLang's own
classes (the wheels' Python files, unchanged, over the cores built from the wheels:
``benchmarks.peers.sglang_corpus``) give equal results, and a name of SGLang's class that the
drop-in lacks fails a test that names it.
"""

from __future__ import annotations

import inspect
import logging

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ngramspec.integrations.sglang import NgramCorpus, leaf_paths_from_mask
from ngramspec.integrations.sglang_legacy import NgramCache as LegacyCache

#: The example of SGLang's own module (its ``__main__``): two windows put, two contexts drafted.
SEED = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]]
QUERIES = [[1, 2, 3], [3, 44]]


@pytest.fixture(scope="module")
def drafted():
    """(corpus, tokens, mask) of SGLang's example on ngramspec's NgramCorpus: BFS trees
    ``[3, 4, 44, 5, 55, 6, 66, 77]`` and ``[44, 55, 66, 77, 88, 99, 100, 0]`` (the second
    padded with token 0, its mask row the root and itself)."""
    corpus = NgramCorpus(max_trie_depth=12, draft_token_num=8)
    corpus.batch_put(SEED)
    corpus.synchronize()
    tokens, mask = corpus.batch_get(["q0", "q1"], QUERIES, [3, 2])
    return corpus, tokens, mask


# ---- leaf_paths_from_mask: hand-built trees ------------------------------------------------------

def test_binary_tree_gives_its_two_branches():
    # Rows mark {0}, {0,1}, {0,2}, {0,1,3}, {0,2,4}: rows 3 and 4 have no later row containing
    # them; 2 is inside 4, 1 inside 3, 0 inside every row.  Row 3 -> tokens 0,1,3; row 4 -> 0,2,4.
    mask = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]]
    assert leaf_paths_from_mask([3, 4, 44, 5, 55], mask) == [[3, 4, 5], [3, 44, 55]]


def test_chain_gives_one_path():
    # {0} inside {0,1} inside {0,1,2}: only the last row is a leaf.
    assert leaf_paths_from_mask([10, 20, 30], [[1, 0, 0], [1, 1, 0], [1, 1, 1]]) == [[10, 20, 30]]


def test_batch_get_trees_with_padding(drafted):
    corpus, tokens, mask = drafted
    t, m = tokens.reshape(2, 8), mask.reshape(2, 8, 8)
    assert t.tolist() == [[3, 4, 44, 5, 55, 6, 66, 77], [44, 55, 66, 77, 88, 99, 100, 0]]
    # Tree 0 (BFS, two branches from 3): rows mark {0}, {0,1}, {0,2}, {0,1,3}, {0,2,4},
    # {0,1,3,5}, {0,2,4,6}, {0,2,4,6,7}; leaves are rows 5 and 7 (6 is inside 7, 4 inside 6,
    # 3 inside 5, ...): tokens of columns 0,1,3,5 and 0,2,4,6,7.
    assert corpus.leaf_paths_from_mask(t[0].tolist(), m[0].tolist()) == [
        [3, 4, 5, 6], [3, 44, 55, 66, 77]]
    # Tree 1: a chain over rows 0..6, then the padded slot 7 marking {0,7}; row 6 ({0..6}) is
    # not inside {0,7}, so both are leaves: the chain and [root, padding token 0].
    assert corpus.leaf_paths_from_mask(t[1].tolist(), m[1].tolist()) == [
        [44, 55, 66, 77, 88, 99, 100], [44, 0]]


def test_equal_rows_keep_the_last():
    # Both rows mark {0}: row 0 is inside the later row 1, row 1 has no later row.
    assert leaf_paths_from_mask([7, 8], [[1, 0], [1, 0]]) == [[7]]


def test_only_later_rows_contain():
    # Row 1 marks {0}, inside the earlier row 0 ({0,1}), but no later row: SGLang keeps it, so
    # the paths need not be prefix-free for masks that are no draft tree.
    assert leaf_paths_from_mask([7, 8], [[1, 1], [1, 0]]) == [[7, 8], [7]]


def test_only_the_value_one_marks():
    # Row 1 of [[1, 0], [2, 1]] marks {1} alone (2 is not 1): neither row contains the other.
    assert leaf_paths_from_mask([5, 6], [[1, 0], [2, 1]]) == [[5], [6]]
    assert leaf_paths_from_mask([5, 6], np.array([[True, False], [True, True]])) == [[5, 6]]


def test_columns_past_the_tokens_count_but_give_no_token():
    # Row 0 marks {0,2}, row 1 {0,1}: neither contains the other; column 2 has no token.
    assert leaf_paths_from_mask([5, 6], [[1, 0, 1], [1, 1, 0]]) == [[5], [5, 6]]


def test_empty_mask_and_empty_rows():
    assert leaf_paths_from_mask([], []) == []
    # Row 1 marks nothing (a leaf: no later row), row 0 marks {0}, not inside the empty set.
    assert leaf_paths_from_mask([9, 8], [[1, 0], [0, 0]]) == [[9], []]


def test_array_inputs_give_the_arrays_elements():
    tokens = np.array([3, 4, 44], np.int64)
    paths = leaf_paths_from_mask(tokens, np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]]))
    assert paths == [[3, 4], [3, 44]]
    assert {type(x) for p in paths for x in p} == {np.int64}  # tokens[c], as SGLang indexes


@pytest.mark.parametrize("tokens, mask, message", [
    ([1, 2], [[1, 0], [1]], "tree_mask must be a rectangular 2-D matrix (rows of equal length)"),
    ([1, 2], [1, 1], "tree_mask must be a 2-D matrix, got 1 dimension(s)"),
    ([1, 2, 3], [[1, 0], [1, 1]], "tree_mask has 2 columns but tokens has 3: each token needs "
                                  "a column"),
])
def test_bad_masks_get_one_line_errors(tokens, mask, message):
    with pytest.raises(ValueError) as e:
        leaf_paths_from_mask(tokens, mask)
    assert str(e.value) == message


# ---- debug_result ----------------------------------------------------------------------------------

class _Tokenizer:
    """Decodes ids as their decimal strings joined by spaces; records each call's keywords."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, dict]] = []

    def decode(self, ids, **kw):
        self.calls.append((list(ids), kw))
        return " ".join(map(str, ids))


def _messages(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_debug_result_logs_the_arrays_and_leaf_paths(drafted, caplog):
    corpus, tokens, mask = drafted
    name = "ngramspec.integrations.sglang"
    caplog.set_level(logging.INFO, logger=name)
    assert corpus.debug_result(tokens, mask) is None
    head = f"\ndecoding_ids={tokens.reshape(-1, 8)!r}\ndecoding_masks={mask.reshape(-1, 8, 8)!r}"
    assert _messages(caplog, name) == [
        head,
        "draft path 0: [[3, 4, 5, 6], [3, 44, 55, 66, 77]]",  # the leaves found above
        "draft path 1: [[44, 55, 66, 77, 88, 99, 100], [44, 0]]"]
    caplog.clear()
    tok = _Tokenizer()
    corpus.debug_result(tokens.reshape(2, 8), mask.reshape(2, 8, 8), tokenizer=tok)
    assert _messages(caplog, name) == [
        head, "result 0:", "draft path 0: [3, 4, 5, 6] -> 3 4 5 6",
        "draft path 0: [3, 44, 55, 66, 77] -> 3 44 55 66 77",
        "result 1:", "draft path 1: [44, 55, 66, 77, 88, 99, 100] -> 44 55 66 77 88 99 100",
        "draft path 1: [44, 0] -> 44 0"]
    assert [kw for _, kw in tok.calls] == [{"ensure_ascii": False}] * 4


def test_debug_result_does_nothing_when_info_is_off(drafted, caplog):
    corpus, tokens, mask = drafted
    caplog.set_level(logging.WARNING, logger="ngramspec.integrations.sglang")
    tok = _Tokenizer()
    corpus.debug_result(tokens, mask, tokenizer=tok)
    assert tok.calls == [] and _messages(caplog, "ngramspec.integrations.sglang") == []


def test_debug_result_refuses_arrays_of_another_tree_size(drafted, caplog):
    corpus, tokens, mask = drafted
    caplog.set_level(logging.INFO, logger="ngramspec.integrations.sglang")
    with pytest.raises(ValueError) as e:
        corpus.debug_result(tokens[:12], mask)
    assert str(e.value) == ("decoding_ids (12 values) and decoding_masks (128 values) are not "
                            "the trees of one batch_get with draft_token_num=8 (8 and 64 values "
                            "per tree)")
    with pytest.raises(ValueError, match=r"^decoding_ids \(16 values\) and decoding_masks "
                                         r"\(64 values\)"):
        corpus.debug_result(tokens, mask[:64])


def test_legacy_cache_has_the_helpers(caplog):
    cache = LegacyCache(branch_length=12, max_match_window_size=10, draft_token_num=8)
    cache.batch_put(SEED)
    cache.synchronize()
    tokens, mask = cache.batch_get([[1, 2, 3]])
    assert tokens.tolist() == [3, 4, 44, 5, 55, 6, 66, 77]  # the same tree as tree 0 above
    assert cache.leaf_paths_from_mask(tokens.tolist(), mask.reshape(8, 8).tolist()) == [
        [3, 4, 5, 6], [3, 44, 55, 66, 77]]
    name = "ngramspec.integrations.sglang_legacy"
    caplog.set_level(logging.INFO, logger=name)
    cache.debug_result(tokens, mask)
    assert _messages(caplog, name)[1:] == ["draft path 0: [[3, 4, 5, 6], [3, 44, 55, 66, 77]]"]
    assert_array_equal(cache.default_mask, np.ones((1, 1), np.int64))
    assert cache.default_mask.dtype == np.int64 and cache.cache is cache._cache


# ---- against SGLang's own classes (marker sglang) --------------------------------------------------

def _sglang_classes():
    from benchmarks.peers import sglang_corpus

    try:
        return sglang_corpus.corpus_class(), sglang_corpus.legacy_cache_class()
    except sglang_corpus.PeerUnavailable as e:
        pytest.skip(f"SGLang's classes unavailable: {e}")


def _pair(version: str):
    """(SGLang's instance, ours, SGLang's logger name, ours) for SGLang's example settings."""
    corpus_cls, legacy_cls = _sglang_classes()
    if version == "0.5.23":
        kw = {"max_trie_depth": 12, "draft_token_num": 8}
        return (corpus_cls(**kw), NgramCorpus(**kw), corpus_cls.__module__,
                "ngramspec.integrations.sglang")
    kw = {"branch_length": 12, "max_match_window_size": 10, "draft_token_num": 8}
    return (legacy_cls(**kw), LegacyCache(**kw), legacy_cls.__module__,
            "ngramspec.integrations.sglang_legacy")


def _public(obj) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def _signature_mismatch(theirs, ours) -> str | None:
    """Why ``ours`` cannot be called as ``theirs`` is (same parameters, names, kinds and
    defaults, in order; ours may add keyword-only ones with defaults), or None."""
    a = list(inspect.signature(theirs).parameters.values())
    b = list(inspect.signature(ours).parameters.values())
    head = [(p.name, p.kind, p.default) for p in b[:len(a)]]
    extra = [p for p in b[len(a):]
             if p.kind is not p.KEYWORD_ONLY or p.default is inspect.Parameter.empty]
    if head != [(p.name, p.kind, p.default) for p in a] or extra:
        return f"SGLang {inspect.signature(theirs)}, ours {inspect.signature(ours)}"
    return None


@pytest.mark.sglang
@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_drop_in_has_every_public_name_of_sglangs_class(version):
    theirs, ours, _, _ = _pair(version)
    missing = sorted(_public(theirs) - _public(ours))
    assert not missing, (f"ngramspec's drop-in for SGLang {version}'s {type(theirs).__name__} "
                         f"lacks {', '.join(missing)}")
    calls = {"__init__": (type(theirs), type(ours))}
    calls.update({n: (getattr(type(theirs), n), getattr(type(ours), n)) for n in _public(theirs)
                  if callable(getattr(theirs, n)) and inspect.isfunction(
                      getattr(type(theirs), n, None))})
    assert {"batch_get", "leaf_paths_from_mask", "debug_result"} <= calls.keys()
    wrong = {n: why for n, (t, o) in calls.items() if (why := _signature_mismatch(t, o))}
    assert not wrong, f"signatures that differ from SGLang {version}'s: {wrong}"
    # The plain values SGLang's class holds (its C++ object, ``cache`` in 0.5.9, excepted).
    for n in sorted(_public(theirs) - calls.keys() - {"cache"}):
        t, o = getattr(theirs, n), getattr(ours, n)
        assert type(t) is type(o), n
        if isinstance(t, np.ndarray):
            assert_array_equal(o, t)
            assert (o.dtype, o.shape) == (t.dtype, t.shape), n
        else:
            assert (n, o) == (n, t)


def _random_masks(rng, count: int):
    for _ in range(count):
        n = int(rng.integers(0, 10))
        cols = n + int(rng.integers(0, 3))
        mask = rng.choice([0, 1, 1, 2], size=(n, cols)) if rng.random() < 0.3 else \
            rng.integers(0, 2, size=(n, cols))
        yield rng.integers(0, 50, size=n).tolist(), mask.tolist()


@pytest.mark.sglang
@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_leaf_paths_equal_sglangs(version):
    theirs, ours, _, _ = _pair(version)
    rng = np.random.default_rng(35)
    cases = list(_random_masks(rng, 300))
    for c in (theirs, ours):
        c.batch_put(SEED)
        c.synchronize()
    # Real trees: the drafts of every prefix of the windows put, from both classes.
    for seq in SEED:
        for k in range(1, len(seq) + 1):
            if version == "0.5.23":
                t, m = theirs.batch_get([f"r{k}"], [seq[:k]], [k])
            else:
                t, m = theirs.batch_get([seq[:k]])
            cases.append((t.tolist(), m.reshape(8, 8).tolist()))
            cases.append((t, m.reshape(8, 8)))  # arrays: the paths hold the arrays' elements
    for tokens, mask in cases:
        got, want = ours.leaf_paths_from_mask(tokens, mask), theirs.leaf_paths_from_mask(tokens,
                                                                                         mask)
        assert got == want, (tokens, mask)
        assert [[type(x) for x in p] for p in got] == [[type(x) for x in p] for p in want]


@pytest.mark.sglang
@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_debug_result_logs_what_sglangs_logs(version, caplog):
    theirs, ours, their_log, our_log = _pair(version)
    caplog.set_level(logging.INFO)
    for c in (theirs, ours):
        c.batch_put(SEED)
        c.synchronize()
    queries = QUERIES + [[3, 6, 999], [5]]
    if version == "0.5.23":
        out = [c.batch_get([f"q{i}" for i in range(4)], queries, [len(q) for q in queries])
               for c in (theirs, ours)]
    else:
        out = [c.batch_get(queries) for c in (theirs, ours)]
    assert_array_equal(out[0][0], out[1][0])
    assert_array_equal(out[0][1], out[1][1])
    for tokenizer in (None, _Tokenizer()):
        caplog.clear()
        theirs.debug_result(*out[0], tokenizer=tokenizer)
        ours.debug_result(*out[1], tokenizer=tokenizer)
        want = _messages(caplog, their_log)
        assert len(want) >= 5 and _messages(caplog, our_log) == want
