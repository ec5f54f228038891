"""ngramspec.testing, the public toolkit: the real backends pass it, planted bugs are caught by
it (check_drafter under -m planted; replay_golden always), bad input gets clear errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.testing import (DrafterMismatch, DraftsDiffer, assert_drafts_equal,
                               check_drafter, golden_scenarios, replay_golden)
from ngramspec.testing import strategies as nst
from planted import PLANTED

PROFILES = ["sglang-0.5.23", "sglang-0.5.9"]


def numba_cache(config):
    return ns.NgramCache(config=config, backend="numba")


def reference_cache(config):
    return ns.NgramCache(config=config, backend="reference")


# --- the real backends pass ---------------------------------------------------------------

# check_drafter at its defaults on the numba backend: test_engine_vs_reference.py.

@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("make", [numba_cache, reference_cache])
def test_real_backends_pass_replay_golden(make, profile):
    report = replay_golden(make, profile)
    assert report, str(report)
    assert report.matches == {"sglang-0.5.23": 598, "sglang-0.5.9": 1880}[profile]
    assert report.mismatched_matches == 0 and report.first_mismatch is None


def test_golden_scenarios_cover_both_eras_and_match_types():
    for version, count in [("sglang-0.5.23", 110), ("sglang-0.5.9", 100)]:
        scenarios = golden_scenarios(version)
        assert len(scenarios) == count
        assert {s["params"]["match_type"] for s in scenarios} == {"BFS", "PROB"}
    # A copy: changing it does not change the next call's answer.
    golden_scenarios("sglang-0.5.9")[0]["ops"].clear()
    assert golden_scenarios("sglang-0.5.9")[0]["ops"]


# --- planted bugs: replay_golden catches them in the default suite ------------------------

GOLDEN_CATCHES = [name for name in PLANTED if name != "stale_after_erase"]


@pytest.mark.parametrize("name", GOLDEN_CATCHES)
def test_replay_golden_catches_planted_bug(name):
    report = replay_golden(PLANTED[name], "sglang-0.5.23")
    assert not report
    assert report.mismatched_scenarios and report.first_mismatch
    text = str(report)
    assert "scenario" in text and "first differing slot" in text and "SGLang" in text


def test_replay_golden_misses_a_stale_state_after_erase():
    """SGLang's recorded erases never reuse an erased id with a longer total_len, so the golden
    file cannot see this bug; check_drafter does (test_check_drafter_catches_planted_bug)."""
    assert replay_golden(PLANTED["stale_after_erase"], "sglang-0.5.23")


# --- planted bugs: check_drafter catches each at its defaults (opt-in: -m planted) --------

@pytest.mark.planted
@pytest.mark.parametrize("name", list(PLANTED))
def test_check_drafter_catches_planted_bug(name):
    with pytest.raises(DrafterMismatch) as info:
        check_drafter(PLANTED[name])
    script = str(info.value)
    assert "cache = make_cache(config)" in script and "# fails with:" in script
    # The replay script is Python that runs up to the failing comparison.
    body = script[script.index("import ngramspec"):script.index("# fails with:")]
    compile(body, "<replay>", "exec")


def test_check_drafter_catches_a_planted_bug_fast():
    """One planted bug in the default suite: an insert window one token short."""
    with pytest.raises(DrafterMismatch, match="replay"):
        check_drafter(PLANTED["insert_window_short"], max_examples=20)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["stale_after_erase", "insert_window_short"])
def test_replay_script_reproduces_the_failure(name):
    with pytest.raises(DrafterMismatch) as info:
        check_drafter(PLANTED[name], shrink_seconds=5)
    script = str(info.value)
    body = script[script.index("import ngramspec"):script.index("# fails with:")]
    with pytest.raises(AssertionError):
        exec(body, {"make_cache": PLANTED[name]})
    exec(body, {"make_cache": reference_cache})  # the reference passes its own replay


# --- assert_drafts_equal ------------------------------------------------------------------

def _two_caches():
    a = ns.NgramCache(max_trie_depth=4, draft_token_num=6, capacity=100)
    b = ns.NgramCache(max_trie_depth=4, draft_token_num=6, capacity=100)
    a.insert([[1, 2, 3, 1, 2, 4, 1, 2, 5]])
    b.insert([[1, 2, 3, 1, 2, 5, 1, 2, 4]])
    return a, b


def test_assert_drafts_equal_passes_on_equal_drafts():
    a, _ = _two_caches()
    assert_drafts_equal(a.match([[1, 2]]), a.match([[1, 2]]))


def test_assert_drafts_equal_draws_both_trees_and_marks_the_slot():
    a, b = _two_caches()
    da, db = a.match([[9], [1, 2]]), b.match([[9], [1, 2]])
    with pytest.raises(DraftsDiffer) as info:
        assert_drafts_equal(da, db, context="step 3")
    text = str(info.value)
    lines = text.splitlines()
    assert lines[0].startswith("drafts differ (step 3): tokens differ in request 1")
    assert "actual (num_drafts=" in lines[1] and "expected (num_drafts=" in lines[1]
    slot = int(lines[0].rsplit(" ", 1)[1])
    assert_array_equal(da.tokens[1, :slot], db.tokens[1, :slot])
    assert da.tokens[1, slot] != db.tokens[1, slot]
    marked = [ln for ln in lines if "<-- first difference" in ln]
    assert len(marked) == 1 and f"[{slot}] {int(da.tokens[1, slot])}" in marked[0]
    assert f"[{slot}] {int(db.tokens[1, slot])}" in marked[0]


def test_assert_drafts_equal_compares_num_drafts_and_shapes():
    a, _ = _two_caches()
    d = a.match([[1, 2]])
    other = ns.DraftBatch(d.tokens, d.mask, d.num_drafts - 1)
    with pytest.raises(DraftsDiffer, match="num_drafts differ"):
        assert_drafts_equal(other, d)
    short = ns.DraftBatch(d.tokens[:, :3], d.mask[:, :3, :3], np.minimum(d.num_drafts, 2))
    with pytest.raises(DraftsDiffer, match="shapes differ"):
        assert_drafts_equal(short, d)


def test_assert_drafts_equal_accepts_sglang_flat_layout():
    a, _ = _two_caches()
    d = a.match([[1, 2], [3]])

    class Flat:
        tokens = d.tokens.ravel()
        mask = d.mask.ravel().astype(np.uint8)
        num_drafts = d.num_drafts

    assert_drafts_equal(Flat(), d)


def test_padding_reads_the_same_on_both_sides():
    """SGLang's raw output (no num_drafts) and a DraftBatch: the padding is one summary line
    on either side, not one line per padding slot on one side only."""
    a = ns.NgramCache(max_trie_depth=4, draft_token_num=8)
    a.insert([[1, 2, 3]])
    d = a.match([[1]])
    n, real = d.tokens.shape[1], int(d.num_drafts[0])
    assert (n, real) == (8, 2)  # 5 padding slots to summarise

    class Raw:  # SGLang's golden side: its trees, no num_drafts
        tokens = d.tokens.astype(np.int64)
        mask = d.mask.astype(np.uint8)

    from ngramspec.testing._compare import draw_tree
    assert draw_tree(d.tokens[0], d.mask[0]) == draw_tree(d.tokens[0], d.mask[0],
                                                           num_drafts=real)
    assert draw_tree(d.tokens[0], d.mask[0])[-1] == f"({n - 1 - real} padding slots)"
    other = d.tokens.copy()
    other[0, 1] += 1
    with pytest.raises(DraftsDiffer) as info:
        assert_drafts_equal(Raw(), ns.DraftBatch(other, d.mask, d.num_drafts))
    text = str(info.value)
    last = text.splitlines()[-1].split()
    assert last == ["(5", "padding", "slots)", "(5", "padding", "slots)"]  # side by side
    assert "] 0" not in text  # no padding slot drawn on either side


def test_assert_drafts_equal_rejects_non_drafts():
    with pytest.raises(TypeError, match="actual must be a DraftBatch.*lacks tokens, mask"):
        assert_drafts_equal(object(), object())


# --- strategies ---------------------------------------------------------------------------

@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_strategies_draw_valid_inputs(profile, data):
    tight = data.draw(st.booleans())
    config = data.draw(nst.configs(profile=profile, tight=tight, beyond=True))
    assert config.profile == profile
    if tight:
        assert config.capacity <= config.trie_depth + 41
    vocab = data.draw(nst.vocabularies())
    seq = data.draw(nst.token_sequences(vocab, min_size=2, max_size=9))
    assert 2 <= len(seq) <= 9 and all(vocab[0] <= t <= vocab[1] for t in seq)
    cache = ns.NgramCache(config=config, backend="reference")
    ops = data.draw(nst.operations(config, vocab=vocab, max_size=6))
    for op in ops:
        nst.apply(cache, op)  # every drawn operation is valid
        assert len(cache) <= config.capacity


def test_token_sequences_reach_int32_extremes_and_repeats():
    seen: set[int] = set()
    repeats = []

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(nst.token_sequences((nst.INT32_MIN, nst.INT32_MAX), max_size=12))
    def draw(seq):
        seen.update(seq)
        repeats.append(len(seq) > len(set(seq)))

    draw()
    assert {nst.INT32_MIN, nst.INT32_MAX} <= seen
    assert any(repeats)


def test_operations_cover_every_kind_and_total_len_moves():
    kinds: set[str] = set()
    moves: set[str] = set()
    config = ns.NgramConfig(max_trie_depth=4, capacity=50)

    # A coverage claim about the strategy: derandomized, so the draw (and the verdict) is fixed.
    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(nst.operations(config, max_size=15))
    def draw(ops):
        last: dict = {}
        for op in ops:
            kinds.add(op.kind if op.kind != "match" or op.request_ids is None else "stateful")
            if op.kind == "match" and op.request_ids is not None:
                for rid, total in zip(op.request_ids, op.total_lens):
                    if rid in last:
                        moves.add("grow" if total > last[rid] else
                                  "same" if total == last[rid] else "back")
                    last[rid] = total
            elif op.kind == "erase":
                for rid in op.request_ids:
                    last.pop(rid, None)
            elif op.kind == "reset":
                last.clear()

    draw()
    assert kinds == {"insert", "match", "stateful", "erase", "reset"}
    assert moves == {"grow", "same", "back"}


# --- clear errors -------------------------------------------------------------------------

def test_wrong_version_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"version must be one of .*sglang-0.5.23.*got '0.5.23'"):
        replay_golden(numba_cache, "0.5.23")
    with pytest.raises(ValueError, match="version must be one of"):
        golden_scenarios("sglang-0.6")
    with pytest.raises(ValueError, match="profile must be one of"):
        check_drafter(numba_cache, profile="sglang")


@pytest.mark.parametrize("run", [lambda make: check_drafter(make, max_examples=2),
                                 lambda make: replay_golden(make, "sglang-0.5.9")])
def test_factory_returning_the_wrong_type(run):
    with pytest.raises(TypeError, match=r"make_cache\(config\) must return .* it returned a "
                                        r"int, which lacks insert, match, erase, reset"):
        run(lambda config: 3)


class NoErase:
    def __init__(self, config):
        self.inner = ns.NgramCache(config=config)
        self.insert, self.match, self.reset = (self.inner.insert, self.inner.match,
                                               self.inner.reset)


class MatchReturnsList:
    def __init__(self, config):
        self.inner = ns.NgramCache(config=config)

    def insert(self, sequences):
        self.inner.insert(sequences)

    def erase(self, ids):
        pass

    def reset(self):
        self.inner.reset()

    def match(self, *args, **kwargs):
        return [1, 2]


@pytest.mark.parametrize("run", [lambda make: check_drafter(make, max_examples=2),
                                 lambda make: replay_golden(make, "sglang-0.5.23")])
def test_cache_missing_a_method(run):
    with pytest.raises(TypeError, match="it returned a NoErase, which lacks erase"):
        run(NoErase)


def test_match_returning_the_wrong_type():
    with pytest.raises(TypeError, match=r"cache.match\(...\) returned list.*lacks tokens, mask"):
        replay_golden(MatchReturnsList, "sglang-0.5.9")


def test_bad_arguments():
    with pytest.raises(TypeError, match="make_cache must be a callable"):
        check_drafter(ns.NgramCache(), max_examples=1)
    with pytest.raises(TypeError, match="make_cache must be a callable"):
        replay_golden("numba", "sglang-0.5.23")
    with pytest.raises(ValueError, match="max_examples must be a positive int"):
        check_drafter(numba_cache, max_examples=0)
    with pytest.raises(ValueError, match="shrink_seconds must be a positive number"):
        check_drafter(numba_cache, shrink_seconds=0)
    @settings(max_examples=1, database=None)
    @given(st.data())
    def draw_with_a_dict(data):
        data.draw(nst.operations({"max_trie_depth": 3}))

    with pytest.raises(TypeError, match="config must be an NgramConfig"):
        draw_with_a_dict()
    with pytest.raises(ValueError, match="vocab must be"):
        nst.token_sequences((0, 2**31))


def test_hypothesis_only_imported_with_the_toolkit():
    code = ("import sys, ngramspec, ngramspec.cache, ngramspec.drafter, ngramspec.simulate; "
            "assert 'hypothesis' not in sys.modules; import ngramspec.testing; "
            "assert 'hypothesis' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the failure report: two trees, their own headers, a first difference that exists ------

def _batch(tokens, mask, num=None):
    from types import SimpleNamespace

    fields = dict(tokens=np.array([tokens], np.int32), mask=np.array([mask], bool))
    if num is not None:
        fields["num_drafts"] = np.array([num], np.int32)
    return SimpleNamespace(**fields)


def _report(actual, expected) -> str:
    with pytest.raises(DraftsDiffer) as e:
        assert_drafts_equal(actual, expected)
    return str(e.value)


def test_a_difference_in_num_drafts_alone_marks_a_slot_that_exists():
    # Token 0 at slot 1: a real draft on one side, padding on the other; nothing else differs.
    text = _report(_batch([5, 0], [[1, 0], [1, 1]], 1), _batch([5, 0], [[1, 0], [1, 1]], 0))
    assert "first differing slot 2" not in text
    assert "first differing slot 1" in text and "num_drafts 1 against 0" in text
    assert "  <-- first difference" in text


def test_the_two_headers_stand_apart_and_padding_is_drawn_as_padding():
    text = _report(_batch([5, 0], [[1, 0], [1, 1]], 1), _batch([5, 0], [[1, 0], [1, 1]], 0))
    header = text.splitlines()[1]
    assert header.split("  ")[0] == "actual (num_drafts=1)"
    width = header.index("expected (num_drafts=0)")
    slot1 = next(line for line in text.splitlines() if "[1] 0" in line)
    assert "(padding)" not in slot1[:width]  # a real draft of token 0
    assert "(padding)" in slot1[width:]


def test_no_none_in_the_headers_of_batches_without_num_drafts():
    text = _report(_batch([5, 7], [[1, 0], [1, 1]], 1), _batch([5, 8], [[1, 0], [1, 1]]))
    assert "None" not in text
    assert text.splitlines()[1].rstrip().endswith("expected")


# --- a class or a factory; the interface checked before the first example ----------------

def test_a_class_is_a_factory():
    # NgramCache's options are keyword-only: the class is called as cls(config=config).
    report = replay_golden(ns.NgramCache, "sglang-0.5.23", stop_at_first=True)
    assert report and report.matches == 598, str(report)
    check_drafter(ns.NgramCache, max_examples=3)

    class Positional:  # a class whose one argument has another name: called positionally
        def __init__(self, cfg):
            self.inner = ns.NgramCache(config=cfg)
            self.insert, self.match = self.inner.insert, self.inner.match
            self.erase, self.reset = self.inner.erase, self.inner.reset

    assert replay_golden(Positional, "sglang-0.5.9", stop_at_first=True)

    def keyword_only(*, config):
        return ns.NgramCache(config=config)

    check_drafter(keyword_only, max_examples=2)


def test_a_factory_that_cannot_take_a_config_is_refused_up_front():
    def two(config, other):
        return ns.NgramCache(config=config)

    for run in (lambda: check_drafter(two, max_examples=2),
                lambda: replay_golden(two, "sglang-0.5.23")):
        with pytest.raises(TypeError, match=r"make_cache must take the NgramConfig as its one "
                                            r"argument .*two\(config, other\)"):
            run()


class OtherKeywords:
    """An adapter whose match names its keywords its own way."""

    made = 0

    def __init__(self, config):
        type(self).made += 1
        self.inner = ns.NgramCache(config=config)

    def insert(self, sequences):
        self.inner.insert(sequences)

    def match(self, contexts, req_ids=None, lens=None):
        return self.inner.match(contexts, request_ids=req_ids, total_lens=lens)

    def erase(self, request_ids):
        self.inner.erase(request_ids)

    def reset(self):
        self.inner.reset()


@pytest.mark.parametrize("run", [lambda make: check_drafter(make, max_examples=5),
                                 lambda make: replay_golden(make, "sglang-0.5.23")])
def test_an_interface_error_is_named_before_the_first_example(run):
    OtherKeywords.made = 0
    with pytest.raises(TypeError, match=r"OtherKeywords\.match\(contexts, req_ids=None, "
                                        r"lens=None\) takes no keyword 'request_ids'"):
        run(OtherKeywords)
    assert OtherKeywords.made == 1  # one cache, inspected; no example ran


def test_a_stateless_check_needs_no_match_keywords():
    # profile 0.5.9 matches statelessly: match(contexts) is all the checks call.
    check_drafter(OtherKeywords, profile="sglang-0.5.9", max_examples=2)
    assert replay_golden(OtherKeywords, "sglang-0.5.9", stop_at_first=True)


def test_a_method_with_the_wrong_arguments_is_named():
    class EraseTakesNothing(OtherKeywords):
        def match(self, contexts, request_ids=None, total_lens=None):
            return self.inner.match(contexts, request_ids=request_ids, total_lens=total_lens)

        def erase(self):
            pass

    with pytest.raises(TypeError, match=r"EraseTakesNothing\.erase\(\) cannot be called as "
                                        r"erase\(request_ids\)"):
        check_drafter(EraseTakesNothing, max_examples=2)
