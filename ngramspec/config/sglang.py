"""A configuration in SGLang's server-argument names: read (choosing the profile by the names)
and written.  The configuration itself is :mod:`ngramspec.config`."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

__all__ = ["fields_of", "args_of", "check_corpora"]

# SGLang server-argument names (after dropping "--", "speculative_" and "ngram_") that map onto
# our fields, per era.  The corpus path is checked as SGLang does, and left to the caller to load.
_SGLANG_SHARED_ARGS = {
    "min_bfs_breadth": "min_bfs_breadth",
    "max_bfs_breadth": "max_bfs_breadth",
    "match_type": "match_type",
    "capacity": "capacity",
    "num_draft_tokens": "draft_token_num",
}
_SGLANG_PROFILE_ARGS = {
    "sglang-0.5.23": {"max_trie_depth": "max_trie_depth",
                      "external_sam_budget": "external_sam_budget",
                      "external_corpus_max_tokens": "external_corpus_max_tokens"},
    "sglang-0.5.9": {"branch_length": "branch_length",
                     "min_match_window_size": "min_match_window_size",
                     "max_match_window_size": "max_match_window_size"},
}
_SGLANG_CORPUS_PATH = "external_corpus_path"
# Corpus tokens across a cache's corpora: automaton states and edges are int32 ids (at most
# 2 states and 3 edges per token).
_MAX_CORPUS_TOKENS = 2**29


def fields_of(args: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The :class:`~ngramspec.NgramConfig` fields (``profile`` included) that SGLang server
    arguments give, and the external corpus path if any; :meth:`NgramConfig.from_sglang_args
    <ngramspec.NgramConfig.from_sglang_args>` says how names are read."""
    if not isinstance(args, Mapping):
        raise TypeError(f"args must be a mapping of SGLang argument names to values, "
                        f"got {type(args).__name__}")
    era_names = {p: set(names) for p, names in _SGLANG_PROFILE_ARGS.items()}
    era_names["sglang-0.5.23"].add(_SGLANG_CORPUS_PATH)
    all_args = dict(_SGLANG_SHARED_ARGS)
    for names in _SGLANG_PROFILE_ARGS.values():
        all_args.update(names)
    known = sorted(["speculative_algorithm", "speculative_num_draft_tokens",
                    f"speculative_ngram_{_SGLANG_CORPUS_PATH}"]
                   + [f"speculative_ngram_{k}" for k in all_args if k != "num_draft_tokens"])
    fields: dict[str, Any] = {}
    corpus_path = None
    seen: dict[str, str] = {}  # profile -> first raw name of that era
    for raw_name, value in args.items():
        if not isinstance(raw_name, str):
            raise TypeError(f"argument names must be str, got {raw_name!r}")
        name = raw_name.lstrip("-").replace("-", "_").removeprefix("speculative_")
        if name == "algorithm":
            if value is not None and str(value).upper() != "NGRAM":
                raise ValueError(f"{raw_name} must be 'NGRAM' for an n-gram cache, "
                                 f"got {value!r}")
            continue
        if name.startswith("ngram_"):
            name = name[len("ngram_"):]
            if name == "num_draft_tokens":  # SGLang spells it without "ngram_"
                name = "ngram_num_draft_tokens"
        for profile, names in era_names.items():
            if name in names:
                seen.setdefault(profile, raw_name)
        if len(seen) > 1:
            new, old = seen["sglang-0.5.23"], seen["sglang-0.5.9"]
            raise ValueError(f"{new!r} (SGLang 0.5.23) and {old!r} (SGLang 0.5.9, window "
                             "era) belong to different SGLang releases; pass the arguments "
                             "of one release")
        if name == _SGLANG_CORPUS_PATH:
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{raw_name} must be a path (str), got "
                                f"{type(value).__name__}")
            corpus_path = value
            continue
        if name not in all_args:
            raise ValueError(f"unknown SGLang argument {raw_name!r}; known: {', '.join(known)}")
        field = all_args[name]
        if field in fields:
            raise ValueError(f"{raw_name} given twice (as another spelling of {field})")
        fields[field] = value
    out = {k: v for k, v in fields.items() if v is not None}
    out["profile"] = next(iter(seen), "sglang-0.5.23")
    return out, corpus_path


def args_of(config: Any, *, plugin: bool = False) -> dict[str, Any]:
    """SGLang server arguments that run ``config`` (see :meth:`NgramConfig.to_sglang_args
    <ngramspec.NgramConfig.to_sglang_args>`)."""
    if plugin:
        if config.profile != "sglang-0.5.23":
            raise ValueError(f"plugin=True: ngramspec's drafter runs in SGLang 0.5.23's "
                             f"worker (profile 'sglang-0.5.23'), not {config.profile!r}")
        exact = config.replace(**{f.name: f.default for f in dataclasses.fields(config)
                                if f.name not in {**_SGLANG_SHARED_ARGS,
                                                  **_SGLANG_PROFILE_ARGS[config.profile]}
                                .values() and f.name != "profile"})
        if exact.match_type not in ("BFS", "PROB"):
            exact = exact.replace(match_type="BFS")
        return {**args_of(exact), "ngramspec_config": config.to_toml()}
    arg_of = {field: arg for arg, field in
              {**_SGLANG_SHARED_ARGS, **_SGLANG_PROFILE_ARGS[config.profile]}.items()}
    lacking = [f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)
               if f.name not in arg_of and f.name != "profile"
               and getattr(config, f.name) != f.default]
    if config.match_type not in ("BFS", "PROB"):
        lacking.append(f"match_type={config.match_type!r}")
    if lacking:
        raise ValueError(f"SGLang has no option for {', '.join(lacking)}; its own flags "
                         "run SGLang-exact configurations only: to_sglang_args(plugin=True) "
                         "gives the flags that run this one on ngramspec's drafter inside "
                         "SGLang's server (ngramspec sglang-launch, docs/sglang.md)")
    if config.profile == "sglang-0.5.9":
        if config.match_type != "BFS":
            raise ValueError(f"match_type={config.match_type!r}: SGLang 0.5.9 servers ignore "
                             "--speculative-ngram-match-type and always run BFS")
        del arg_of["match_type"]
    args: dict[str, Any] = {"speculative_algorithm": "NGRAM"}
    for f in dataclasses.fields(config):
        if f.name in arg_of:
            arg = arg_of[f.name]
            key = ("speculative_num_draft_tokens" if arg == "num_draft_tokens"
                   else f"speculative_ngram_{arg}")
            args[key] = getattr(config, f.name)
    return args


def check_corpora(cfg: Any, check_int: Any) -> None:
    """SGLang's server checks of the external-corpus options (spec 3.6.1), on ``cfg``
    (a config being built: its ints are normalised by ``check_int``)."""
    for name in ("external_sam_budget", "external_corpus_max_tokens"):
        object.__setattr__(cfg, name, check_int(name, getattr(cfg, name)))
    budget, cap = cfg.external_sam_budget, cfg.external_corpus_max_tokens
    assert cfg.draft_token_num is not None
    if not 0 <= budget <= cfg.draft_token_num - 1:
        raise ValueError(f"external_sam_budget must be in [0, draft_token_num - 1 = "
                         f"{cfg.draft_token_num - 1}] (0 = corpora off), got {budget}")
    if not 1 <= cap <= _MAX_CORPUS_TOKENS:
        raise ValueError(f"external_corpus_max_tokens must be in [1, {_MAX_CORPUS_TOKENS}], "
                         f"got {cap}")
    if budget and (cfg.profile != "sglang-0.5.23" or cfg.match_type == "ADAPTIVE"):
        raise ValueError("external_sam_budget > 0 (external corpora) exists for profile "
                         "'sglang-0.5.23' with match_type 'BFS' or 'PROB' only, got "
                         f"profile={cfg.profile!r}, match_type={cfg.match_type!r}")
