"""The checks of :class:`~ngramspec.NgramConfig`'s settings, in SGLang's own order where SGLang
checks them, then what SGLang does not check and crashes on, then the options beyond SGLang;
each value normalised in place (ints, bools, floats), each error naming its field."""

from __future__ import annotations

import operator
from typing import Any

from . import sglang as config_sglang
from . import vllm as config_vllm
from .modes import (ADAPTIVE_MAX_DRAFT, ADAPTIVE_ONLY, AUTO, BEYOND_SGLANG, INT32_MAX,
                    MATCH_TYPES, PROFILE_FIELDS, PROFILES, SGLANG_ONLY, VLLM_PROFILE)

__all__ = ["check_settings"]


def _np_bool_types() -> tuple[type, ...]:
    """NumPy's bool type when NumPy is imported (a config never imports it itself)."""
    import sys
    np = sys.modules.get("numpy")
    return (np.bool_,) if np is not None else ()


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} "
                        f"{value!r}") from None


def check_settings(cfg: Any) -> None:
    """Check an :class:`~ngramspec.NgramConfig`'s every setting (a ``TypeError`` or
    ``ValueError`` naming the field) and normalise it in place (the dataclass is frozen:
    ``object.__setattr__``)."""
    if not isinstance(cfg.profile, str) or cfg.profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {cfg.profile!r}")
    own = PROFILE_FIELDS[cfg.profile]
    if cfg.profile == VLLM_PROFILE:
        config_vllm.resolve(cfg, _check_int, SGLANG_ONLY)
    for other, fields in PROFILE_FIELDS.items():
        for name in fields:
            if name not in own and getattr(cfg, name) is not None:
                raise ValueError(
                    f"{name} is an option of profile {other!r}, not of {cfg.profile!r} "
                    f"(its options: {', '.join(own)}; pass profile={other!r} for {name})")
    for name, default in own.items():
        value = getattr(cfg, name)
        object.__setattr__(cfg, name, default if value is None else _check_int(name, value))
    if cfg.draft_token_num is None:
        object.__setattr__(cfg, "draft_token_num", 12 if cfg.profile == "sglang-0.5.23"
                           else cfg.max_match_window_size)
    for name in ("min_bfs_breadth", "max_bfs_breadth", "draft_token_num", "capacity"):
        object.__setattr__(cfg, name, _check_int(name, getattr(cfg, name)))
    if not isinstance(cfg.match_type, str):
        raise TypeError(f"match_type must be a str, one of {MATCH_TYPES}, "
                        f"got {type(cfg.match_type).__name__} {cfg.match_type!r}")
    if cfg.match_type not in MATCH_TYPES:
        raise ValueError(f"match_type must be one of {MATCH_TYPES}, got {cfg.match_type!r}")
    _check_beyond_sglang(cfg)
    if cfg.profile == VLLM_PROFILE:
        config_sglang.check_corpora(cfg, _check_int)
        return
    # SGLang's own constructor checks, in its order.
    depth_name = "max_trie_depth" if cfg.profile == "sglang-0.5.23" else "branch_length"
    if cfg.trie_depth <= 1:
        raise ValueError(f"{depth_name} must be > 1, got {cfg.trie_depth}")
    if cfg.profile == "sglang-0.5.9":
        lo, hi = cfg.min_match_window_size, cfg.max_match_window_size
        assert lo is not None and hi is not None
        if lo <= 0:
            raise ValueError(f"min_match_window_size must be > 0, got {lo}")
        if lo > hi:
            raise ValueError(f"min_match_window_size ({lo}) must be <= "
                             f"max_match_window_size ({hi})")
        if hi >= cfg.trie_depth:
            raise ValueError(f"max_match_window_size ({hi}) must be < branch_length "
                             f"({cfg.trie_depth})")
    if cfg.min_bfs_breadth <= 0:
        raise ValueError(f"min_bfs_breadth must be > 0, got {cfg.min_bfs_breadth}")
    if cfg.min_bfs_breadth > cfg.max_bfs_breadth:
        raise ValueError(f"min_bfs_breadth ({cfg.min_bfs_breadth}) must be <= "
                         f"max_bfs_breadth ({cfg.max_bfs_breadth})")
    assert cfg.draft_token_num is not None
    if cfg.draft_token_num <= 0:
        raise ValueError(f"draft_token_num must be > 0, got {cfg.draft_token_num}")
    # What SGLang does not check and crashes on.
    if cfg.capacity <= cfg.trie_depth:
        raise ValueError(
            f"capacity must be greater than {depth_name} ({cfg.trie_depth}), got "
            f"{cfg.capacity}: one insert may need {depth_name} new nodes plus the root")
    for name in (depth_name, "max_bfs_breadth", "draft_token_num", "capacity"):
        if getattr(cfg, name) > INT32_MAX:
            raise ValueError(f"{name} must fit in int32 (<= {INT32_MAX}), "
                             f"got {getattr(cfg, name)}")
    config_sglang.check_corpora(cfg, _check_int)


def _check_beyond_sglang(cfg: Any) -> None:
    for name in ("index_prompt", "exact_counts", "local_index", "calibrated_estimates",
                 "chain"):
        if not isinstance(getattr(cfg, name), (bool, _np_bool_types())):
            raise TypeError(f"{name} must be a bool, got {type(getattr(cfg, name)).__name__}")
        object.__setattr__(cfg, name, bool(getattr(cfg, name)))
    for name in ADAPTIVE_ONLY:
        value = getattr(cfg, name)
        if name == "min_expected_accept" and isinstance(value, str):
            if value != AUTO:
                raise ValueError(f"min_expected_accept must be a number >= 0 or 'auto' "
                                 f"(sizes from step costs), got {value!r}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
        value = float(value)
        if not (value >= 0.0 and value != float("inf")):
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        object.__setattr__(cfg, name, value)
    if cfg.min_token_prob > 1.0:
        raise ValueError(f"min_token_prob is a probability (0..1), got {cfg.min_token_prob}")
    if cfg.calibrated_estimates and cfg.shared_pseudo_count:
        raise ValueError("calibrated_estimates=True and shared_pseudo_count="
                         f"{cfg.shared_pseudo_count} both replace the count ratios; set "
                         "shared_pseudo_count=0 to use the calibrated estimates")
    beyond = [n for n in BEYOND_SGLANG if getattr(cfg, n)]
    if not cfg.mode.sglang:
        beyond.append(f"match_type={cfg.match_type!r}")
    if beyond and cfg.profile != "sglang-0.5.23":
        raise ValueError(f"{', '.join(beyond)}: options beyond SGLang exist for profile "
                         f"'sglang-0.5.23' only, not {cfg.profile!r}")
    if (w := cfg.shared_prompt_window) is not None:
        object.__setattr__(cfg, "shared_prompt_window", _check_int("shared_prompt_window", w))
        if not 0 <= w <= INT32_MAX:
            raise ValueError(f"shared_prompt_window must be in [0, {INT32_MAX}] (prompt "
                             f"tokens) or None (the whole prompt), got {w}")
    if cfg.local_index and cfg.match_type != "ADAPTIVE":
        raise ValueError("local_index=True drafts through match_type='ADAPTIVE' (SGLang's "
                         f"BFS/PROB have one trie), got match_type={cfg.match_type!r}")
    if cfg.match_type != "ADAPTIVE":
        set_ = [n for n in ADAPTIVE_ONLY + ("calibrated_estimates",) if getattr(cfg, n)]
        if set_:
            raise ValueError(f"{', '.join(set_)} only apply to match_type='ADAPTIVE' "
                             f"(got match_type={cfg.match_type!r})")
    elif cfg.draft_token_num is not None and cfg.draft_token_num > ADAPTIVE_MAX_DRAFT:
        raise ValueError(f"draft_token_num must be <= {ADAPTIVE_MAX_DRAFT} with "
                         f"match_type='ADAPTIVE', got {cfg.draft_token_num}")
