import pytest

import ngramspec as ns
from ngramspec import NgramConfig


def test_defaults_are_sglang_server_defaults():
    cfg = NgramConfig()
    assert (cfg.max_trie_depth, cfg.min_bfs_breadth, cfg.max_bfs_breadth, cfg.draft_token_num,
            cfg.match_type, cfg.capacity) == (18, 1, 10, 12, "BFS", 10_000_000)
    assert ns.NgramCache().config == cfg


# The tree options' checks, the same in both profiles.
TREE_OPTION_ERRORS = [
    (dict(min_bfs_breadth=0), "min_bfs_breadth must be > 0"),
    (dict(min_bfs_breadth=5, max_bfs_breadth=4), "must be <= max_bfs_breadth"),
    (dict(draft_token_num=0), "draft_token_num must be > 0"),
    (dict(match_type="DFS"), "match_type must be one of"),
]


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_trie_depth=1), "max_trie_depth must be > 1"),
    *TREE_OPTION_ERRORS,
    (dict(capacity=18), "capacity must be greater than max_trie_depth"),
    (dict(capacity=5, max_trie_depth=6), "capacity must be greater"),
    (dict(capacity=1), "capacity must be greater"),
    (dict(capacity=2**40), "fit in int32"),
    (dict(profile="sglang-9"), "profile must be one of"),
])
def test_invalid_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NgramConfig(**kwargs)
    if "profile" not in kwargs:
        with pytest.raises(ValueError, match=match):
            ns.NgramCache(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(max_trie_depth=3.0), dict(capacity="100"),
                                    dict(draft_token_num=True), dict(match_type=1)])
def test_invalid_types(kwargs):
    with pytest.raises(TypeError):
        NgramConfig(**kwargs)


def test_capacity_just_above_depth_works():
    c = ns.NgramCache(max_trie_depth=4, capacity=5, draft_token_num=4)
    c.insert([[1, 2, 3, 4, 5, 6, 7, 8]])
    assert len(c) <= 5
    assert c.match([[6, 7]]).tokens.shape == (1, 4)


def test_config_and_options_are_exclusive():
    with pytest.raises(ValueError, match="not both"):
        ns.NgramCache(config=NgramConfig(), draft_token_num=8)
    with pytest.raises(TypeError, match="NgramConfig"):
        ns.NgramCache(config={"draft_token_num": 8})
    with pytest.raises(TypeError):
        ns.NgramCache(18)  # keyword-only
    assert ns.NgramCache(config=NgramConfig(draft_token_num=8)).config.draft_token_num == 8


def test_frozen():
    cfg = NgramConfig()
    with pytest.raises(AttributeError):
        cfg.capacity = 5  # type: ignore[misc]
    assert cfg.replace(capacity=100).capacity == 100


def test_from_sglang_args_spellings():
    cfg = NgramConfig.from_sglang_args({
        "--speculative-ngram-max-bfs-breadth": 8,
        "speculative_ngram_min_bfs_breadth": 2,
        "ngram_max_trie_depth": 12,
        "match_type": "PROB",
        "speculative-num-draft-tokens": 16,
        "speculative_algorithm": "NGRAM",
        "speculative_ngram_capacity": None,
    })
    assert cfg == NgramConfig(max_bfs_breadth=8, min_bfs_breadth=2, max_trie_depth=12,
                              match_type="PROB", draft_token_num=16)
    assert NgramConfig.from_sglang_args({}) == NgramConfig()


@pytest.mark.parametrize("args, exc, match", [
    ({"speculative_algorithm": "EAGLE"}, ValueError, "must be 'NGRAM'"),
    ({"speculative_ngram_external_corpus_path": "c.jsonl"}, ValueError,
     "external_sam_budget must be > 0"),
    ({"speculative_ngram_external_sam_budget": 12}, ValueError,
     r"external_sam_budget must be in \[0, draft_token_num - 1 = 11\]"),
    ({"speculative_ngram_bogus": 1}, ValueError, "known: .*speculative_ngram_max_trie_depth"),
    ({"speculative_ngram_max_trie_depth": 12, "speculative_ngram_branch_length": 18},
     ValueError, "belong to different SGLang releases"),
    ({"speculative_ngram_min_match_window_size": 1, "--speculative-ngram-max-trie-depth": 18},
     ValueError, "belong to different SGLang releases"),
    ({"speculative_ngram_branch_length": 18, "speculative_ngram_external_corpus_path": None},
     ValueError, "belong to different SGLang releases"),
    ({"speculative_ngram_num_draft_tokens": 8}, ValueError, "unknown SGLang argument"),
    ({"speculative_ngram_external_corpus_path": None,
      "speculative_ngram_external_corpus_max_tokens": 10_000_000}, None, None),
    ({"max_bfs_breadth": 3, "--speculative-ngram-max-bfs-breadth": 4}, ValueError, "twice"),
    ({"speculative_ngram_capacity": 3}, ValueError, "capacity must be greater"),
    ([("max_bfs_breadth", 3)], TypeError, "mapping"),
])
def test_from_sglang_args_errors(args, exc, match):
    if exc is None:  # unset external-corpus arguments, as in a full server-args dump
        assert NgramConfig.from_sglang_args(args) == NgramConfig()
        return
    with pytest.raises(exc, match=match):
        NgramConfig.from_sglang_args(args)


# --- the window-era profile (SGLang 0.5.9) -------------------------------------------------

LEGACY = "sglang-0.5.9"


def test_legacy_defaults_are_059_server_defaults():
    cfg = NgramConfig(profile=LEGACY)
    assert (cfg.branch_length, cfg.min_match_window_size, cfg.max_match_window_size,
            cfg.min_bfs_breadth, cfg.max_bfs_breadth, cfg.draft_token_num, cfg.match_type,
            cfg.capacity) == (18, 1, 12, 1, 10, 12, "BFS", 10_000_000)
    assert cfg.max_trie_depth is None
    assert (cfg.trie_depth, cfg.match_length, cfg.insert_length, cfg.stateful) == (18, 12, 18,
                                                                                   False)
    assert ns.NgramCache(profile=LEGACY).config == cfg
    # The 0.5.23 default keeps its meaning.
    new = NgramConfig()
    assert (new.max_trie_depth, new.trie_depth, new.match_length, new.insert_length,
            new.stateful, new.branch_length) == (18, 18, 18, 18, True, None)


def test_legacy_draft_token_num_follows_max_window_as_the_server_did():
    assert NgramConfig(profile=LEGACY, max_match_window_size=8).draft_token_num == 8
    assert NgramConfig(profile=LEGACY, max_match_window_size=8,
                       draft_token_num=5).draft_token_num == 5


@pytest.mark.parametrize("kwargs, match", [
    (dict(branch_length=1), "branch_length must be > 1"),
    (dict(min_match_window_size=0), "min_match_window_size must be > 0"),
    (dict(min_match_window_size=5, max_match_window_size=4),
     "min_match_window_size \\(5\\) must be <= max_match_window_size \\(4\\)"),
    (dict(max_match_window_size=18), "max_match_window_size \\(18\\) must be < branch_length"),
    (dict(branch_length=12), "max_match_window_size \\(12\\) must be < branch_length \\(12\\)"),
    *TREE_OPTION_ERRORS,
    (dict(capacity=18), "capacity must be greater than branch_length \\(18\\)"),
    (dict(branch_length=6, max_match_window_size=5, capacity=6), "capacity must be greater"),
    (dict(capacity=2**40), "fit in int32"),
    (dict(branch_length=2**40, capacity=2**40 + 1), "branch_length must fit in int32"),
    # SGLang's order: the first failing check is reported.
    (dict(branch_length=1, min_match_window_size=0), "branch_length must be > 1"),
    (dict(max_match_window_size=20, min_bfs_breadth=0), "max_match_window_size"),
])
def test_legacy_invalid_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NgramConfig(profile=LEGACY, **kwargs)
    with pytest.raises(ValueError, match=match):
        ns.NgramCache(profile=LEGACY, **kwargs)


@pytest.mark.parametrize("kwargs", [dict(branch_length=3.0), dict(min_match_window_size="1"),
                                    dict(max_match_window_size=True)])
def test_legacy_invalid_types(kwargs):
    with pytest.raises(TypeError, match=next(iter(kwargs))):
        NgramConfig(profile=LEGACY, **kwargs)


@pytest.mark.parametrize("profile, kwargs, match", [
    (LEGACY, dict(max_trie_depth=18),
     "max_trie_depth is an option of profile 'sglang-0.5.23', not of 'sglang-0.5.9'"),
    ("sglang-0.5.23", dict(branch_length=18),
     "branch_length is an option of profile 'sglang-0.5.9', not of 'sglang-0.5.23'"),
    (None, dict(min_match_window_size=1), "min_match_window_size is an option of profile"),
    (None, dict(max_match_window_size=12), "max_match_window_size is an option of profile"),
])
def test_options_of_the_other_profile_are_rejected(profile, kwargs, match):
    extra = {} if profile is None else dict(profile=profile)
    with pytest.raises(ValueError, match=match):
        NgramConfig(**extra, **kwargs)
    with pytest.raises(ValueError, match=match):
        ns.NgramCache(**extra, **kwargs)


def test_legacy_replace_and_config_argument():
    cfg = NgramConfig(profile=LEGACY, branch_length=8, max_match_window_size=4)
    assert cfg.replace(capacity=9).capacity == 9
    with pytest.raises(ValueError, match="max_match_window_size \\(4\\) must be < branch_length"):
        cfg.replace(branch_length=4)
    with pytest.raises(ValueError, match="branch_length is an option of profile"):
        cfg.replace(profile="sglang-0.5.23")
    assert ns.NgramCache(config=cfg, backend="reference").config is cfg
    with pytest.raises(ValueError, match="not both"):
        ns.NgramCache(config=cfg, branch_length=8)


def test_from_sglang_args_picks_the_legacy_profile_by_name():
    cfg = NgramConfig.from_sglang_args({
        "--speculative-ngram-min-match-window-size": 2,
        "speculative_ngram_max_match_window_size": 10,
        "speculative-ngram-branch-length": 16,
        "speculative_ngram_min_bfs_breadth": 1,
        "speculative_ngram_max_bfs_breadth": 8,
        "speculative_ngram_match_type": "PROB",
        "speculative_ngram_capacity": 1000,
        "speculative_num_draft_tokens": None,
        "speculative_algorithm": "NGRAM",
    })
    assert cfg == NgramConfig(profile=LEGACY, min_match_window_size=2, max_match_window_size=10,
                              branch_length=16, max_bfs_breadth=8, match_type="PROB",
                              capacity=1000, draft_token_num=10)
    # Any one era-specific name decides; the rest take that era's defaults.
    assert NgramConfig.from_sglang_args({"branch_length": None}) == NgramConfig(profile=LEGACY)
    assert NgramConfig.from_sglang_args(
        {"speculative_ngram_max_match_window_size": 6}).draft_token_num == 6
    # Only shared names: the default profile.
    assert NgramConfig.from_sglang_args({"max_bfs_breadth": 4}).profile == "sglang-0.5.23"
    assert NgramConfig.from_sglang_args({"max_trie_depth": 9}).profile == "sglang-0.5.23"
    with pytest.raises(ValueError, match="max_match_window_size \\(18\\) must be < branch_length"):
        NgramConfig.from_sglang_args({"speculative_ngram_max_match_window_size": 18})


def test_legacy_cache_ignores_request_ids_and_total_lens():
    for backend in ("reference", "numba"):
        c = ns.NgramCache(profile=LEGACY, branch_length=5, max_match_window_size=2,
                          max_bfs_breadth=3, draft_token_num=5, capacity=1000, backend=backend)
        c.insert([[5, 1, 2, 3, 7], [1, 2, 3, 8], [9, 1, 2, 4]])
        plain = c.match([[9, 1, 2]])
        # Ignored, not even checked: a stale length or a repeated id changes nothing.
        with_ids = c.match([[9, 1, 2], [9, 1, 2]], request_ids=["r", "r"], total_lens=[1, 1])
        assert plain.tokens.tolist() == [[2, 3, 4, 8, 0]]  # legacy spec section 11 (BFS)
        assert with_ids.tokens.tolist() == [[2, 3, 4, 8, 0]] * 2
        c.erase(["r"])  # a no-op: there are no match states
        assert c.match([[9, 1, 2]]).tokens.tolist() == [[2, 3, 4, 8, 0]]
        c.warmup()
