import pytest

import ngramspec as ns
from ngramspec import NgramConfig


def test_defaults_are_sglang_server_defaults():
    cfg = NgramConfig()
    assert (cfg.max_trie_depth, cfg.min_bfs_breadth, cfg.max_bfs_breadth, cfg.draft_token_num,
            cfg.match_type, cfg.capacity) == (18, 1, 10, 12, "BFS", 10_000_000)
    assert ns.NgramCache().config == cfg


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_trie_depth=1), "max_trie_depth must be > 1"),
    (dict(min_bfs_breadth=0), "min_bfs_breadth must be > 0"),
    (dict(min_bfs_breadth=5, max_bfs_breadth=4), "must be <= max_bfs_breadth"),
    (dict(draft_token_num=0), "draft_token_num must be > 0"),
    (dict(match_type="DFS"), "match_type must be one of"),
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
    ({"speculative_ngram_external_corpus_path": "c.jsonl"}, ValueError, "not supported"),
    ({"speculative_ngram_external_sam_budget": 4}, ValueError, "not supported"),
    ({"speculative_ngram_bogus": 1}, ValueError, "known: .*speculative_ngram_max_trie_depth"),
    ({"speculative_ngram_min_match_window_size": 1}, ValueError, "unknown SGLang argument"),
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
