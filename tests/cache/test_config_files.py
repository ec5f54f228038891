"""Presets, TOML config files and SGLang server arguments out of a config."""

from __future__ import annotations


import dataclasses
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ngramspec import NgramConfig
from ngramspec.config import PRESETS


# External corpora (SGLang 0.5.23's suffix automata) are config fields where supported.
CORPORA = "external_sam_budget" in NgramConfig.__dataclass_fields__


@st.composite
def sglang_configs(draw):
    """Random SGLang-exact configurations of either era (every option given or left out)."""
    era = draw(st.sampled_from(["sglang-0.5.23", "sglang-0.5.9"]))
    opts: dict = {"profile": era}
    maybe = lambda name, strat: opts.__setitem__(name, draw(strat)) if draw(st.booleans()) \
        else None  # noqa: E731
    maybe("min_bfs_breadth", st.integers(1, 6))
    maybe("max_bfs_breadth", st.integers(1, 40))
    maybe("draft_token_num", st.integers(1, 300))
    maybe("capacity", st.integers(2, 2**31 - 1))
    if era == "sglang-0.5.23":
        maybe("max_trie_depth", st.integers(2, 64))
        maybe("match_type", st.sampled_from(["BFS", "PROB"]))
        if CORPORA:
            maybe("external_sam_budget", st.integers(0, 20))
            maybe("external_corpus_max_tokens", st.integers(1, 2**29))
    else:
        maybe("branch_length", st.integers(2, 64))
        maybe("min_match_window_size", st.integers(1, 10))
        maybe("max_match_window_size", st.integers(1, 40))
    try:
        return NgramConfig(**opts)
    except ValueError:
        assume(False)


@st.composite
def any_configs(draw):
    """Random valid configurations, options beyond SGLang included."""
    if draw(st.booleans()):
        return draw(sglang_configs())
    opts = dict(max_trie_depth=draw(st.integers(2, 40)),
                draft_token_num=draw(st.integers(1, 256)),
                index_prompt=draw(st.booleans()), exact_counts=draw(st.booleans()),
                match_type="ADAPTIVE", local_index=draw(st.booleans()),
                min_token_prob=draw(st.floats(0, 1)),
                max_spec_factor=draw(st.floats(0, 1e6)),
                min_expected_accept=draw(st.floats(0, 1e3)))
    return NgramConfig(**opts)


@given(sglang_configs())
def test_sglang_args_round_trip(cfg):
    args = cfg.to_sglang_args()
    assert args["speculative_algorithm"] == "NGRAM"
    assert NgramConfig.from_sglang_args(args) == cfg
    # The same as command-line spellings.
    flags = {"--" + k.replace("_", "-"): v for k, v in args.items()}
    assert NgramConfig.from_sglang_args(flags) == cfg


def test_sglang_args_names():
    want = {"speculative_algorithm": "NGRAM", "speculative_ngram_max_trie_depth": 18,
            "speculative_ngram_min_bfs_breadth": 1, "speculative_ngram_max_bfs_breadth": 10,
            "speculative_num_draft_tokens": 12, "speculative_ngram_match_type": "BFS",
            "speculative_ngram_capacity": 10_000_000}
    if CORPORA:  # SGLang's server defaults (spec 1.1)
        want.update(speculative_ngram_external_sam_budget=0,
                    speculative_ngram_external_corpus_max_tokens=10_000_000)
    assert NgramConfig().to_sglang_args() == want
    old = NgramConfig(profile="sglang-0.5.9", branch_length=10, max_match_window_size=6)
    args = old.to_sglang_args()
    assert args["speculative_ngram_branch_length"] == 10
    assert args["speculative_num_draft_tokens"] == 6
    assert "speculative_ngram_match_type" not in args and \
        "speculative_ngram_max_trie_depth" not in args


@pytest.mark.parametrize("cfg,names", [
    (NgramConfig.recommended(), ["index_prompt=True", "exact_counts=True", "local_index=True",
                                 "min_token_prob=0.5", "shared_pseudo_count=2.0",
                                 "match_type='ADAPTIVE'"]),
    (NgramConfig(index_prompt=True), ["index_prompt=True"]),
    (NgramConfig(match_type="ADAPTIVE"), ["match_type='ADAPTIVE'"]),
])
def test_sglang_args_name_what_sglang_lacks(cfg, names):
    with pytest.raises(ValueError, match="SGLang has no option for") as e:
        cfg.to_sglang_args()
    for name in names:
        assert name in str(e.value)


def test_sglang_args_window_era_prob_refused():
    with pytest.raises(ValueError, match="0.5.9 servers ignore"):
        NgramConfig(profile="sglang-0.5.9", match_type="PROB").to_sglang_args()


@given(any_configs())
def test_toml_round_trip(cfg):
    text = cfg.to_toml()
    assert NgramConfig.from_toml(text) == cfg


def test_toml_file_round_trip(tmp_path):
    cfg = NgramConfig.preset("recommended-cost-aware", capacity=123_456)
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    assert NgramConfig.from_toml(path) == cfg
    assert NgramConfig.from_toml(str(path.read_text())) == cfg


def test_presets():
    assert PRESETS == ("sglang", "recommended", "recommended-cost-aware", "calibrated", "chain",
                       "vllm")
    assert NgramConfig.preset("vllm") == NgramConfig(profile="vllm-0.33")
    chain = NgramConfig.preset("chain")
    assert chain == NgramConfig.recommended(chain=True, min_token_prob=0.2,
                                            max_spec_factor=2.0, draft_token_num=8)
    assert NgramConfig.from_toml(chain.to_toml(preset="chain")) == chain
    assert NgramConfig.preset("vllm", num_speculative_tokens=3).draft_token_num == 4
    assert NgramConfig.preset("sglang") == NgramConfig()
    assert NgramConfig.preset("recommended") == NgramConfig.recommended()
    aware = NgramConfig.preset("recommended-cost-aware")
    assert aware == NgramConfig.recommended(min_expected_accept=4.0)
    assert NgramConfig.preset("recommended", max_trie_depth=30).max_trie_depth == 30
    with pytest.raises(ValueError, match="unknown preset 'fast'; presets: sglang"):
        NgramConfig.preset("fast")


@pytest.mark.parametrize("text,message", [
    ("max_bfs_breadht = 4", "TOML: unknown field 'max_bfs_breadht' (did you mean "
                            "'max_bfs_breadth'?)"),
    ('draft_token_num = "8"', "TOML: field 'draft_token_num' must be an integer, got str '8'"),
    ("draft_token_num = 8.0", "field 'draft_token_num' must be an integer, got float 8.0"),
    ("index_prompt = 1", "field 'index_prompt' must be true or false, got int 1"),
    ("min_token_prob = true", "field 'min_token_prob' must be a number, got bool True"),
    ("match_type = 3", "field 'match_type' must be a string, got int 3"),
    ("[match_type]\nx = 1", "field 'match_type' must be a string, got a table"),
    ("max_bfs_breadth = 0", "TOML: min_bfs_breadth (1) must be <= max_bfs_breadth (0)"),
    ('match_type = "DFS"', "TOML: match_type must be one of"),
    ("draft_token_num = ", "TOML: not valid TOML"),
    ("my.toml", "not valid TOML"),
])
def test_toml_errors(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        NgramConfig.from_toml(text)


def test_toml_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("capacity = 5\n")
    with pytest.raises(ValueError, match=f"{bad}: capacity must be greater than"):
        NgramConfig.from_toml(bad)
    with pytest.raises(ValueError, match="cannot read the config file"):
        NgramConfig.from_toml(tmp_path / "missing.toml")
    with pytest.raises(TypeError, match="TOML text"):
        NgramConfig.from_toml(5)  # type: ignore[arg-type]


def test_toml_writes_every_set_field():
    cfg = NgramConfig(profile="sglang-0.5.9")
    keys = [line.split(" = ")[0] for line in cfg.to_toml().splitlines()
            if not line.startswith("#")]
    assert keys == [f.name for f in dataclasses.fields(cfg) if getattr(cfg, f.name) is not None]


@pytest.mark.skipif(not CORPORA, reason="external corpora are not config fields here")
def test_sglang_args_external_corpora():
    cfg = NgramConfig(external_sam_budget=3, external_corpus_max_tokens=1000)
    args = cfg.to_sglang_args()
    assert args["speculative_ngram_external_sam_budget"] == 3
    assert args["speculative_ngram_external_corpus_max_tokens"] == 1000
    assert NgramConfig.from_sglang_args(args) == cfg
    old = NgramConfig(profile="sglang-0.5.9", external_corpus_max_tokens=1000)
    with pytest.raises(ValueError, match="SGLang has no option for "
                                         "external_corpus_max_tokens=1000"):
        old.to_sglang_args()
