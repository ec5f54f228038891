"""The configuration ngramspec's vLLM ``Proposer`` runs: read from vLLM's ``VllmConfig`` and
from the environment (:data:`~ngramspec.config.vllm.ENV_CONFIG`,
:data:`~ngramspec.config.vllm.ENV_PRESET`), with ``chain=True`` and ``draft_token_num = k + 1``
forced (vLLM verifies chains of ``num_speculative_tokens``)."""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from typing import Any

from .settings import PRESETS, VLLM_PROFILE, NgramConfig, toml_options
from .vllm import ENV_CONFIG, ENV_PRESET

__all__ = ["default_config", "read_vllm_config", "resolve_config"]


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"vllm_config.{where} must be an integer >= 1, got {value!r}")
    return int(value)


def read_vllm_config(vllm_config: Any) -> tuple[int, int, int]:
    """``(num_speculative_tokens, max_num_seqs, max_model_len)`` read by attribute from vLLM's
    ``VllmConfig`` (or any object with its attributes), each checked (an integer >= 1)."""
    values = []
    for section, field in (("speculative_config", "num_speculative_tokens"),
                           ("scheduler_config", "max_num_seqs"),
                           ("model_config", "max_model_len")):
        part = getattr(vllm_config, section, None)
        if part is None:
            raise ValueError(f"vllm_config has no {section}: ngramspec's Proposer reads "
                             f"{section}.{field} (pass vLLM's VllmConfig)")
        if not hasattr(part, field):
            raise ValueError(f"vllm_config.{section} has no {field} (pass vLLM's VllmConfig)")
        values.append(_positive_int(getattr(part, field), f"{section}.{field}"))
    return values[0], values[1], values[2]


def default_config(num_speculative_tokens: int, *, cost_aware: bool = False) -> NgramConfig:
    """The configuration used when neither :data:`ENV_CONFIG` nor :data:`ENV_PRESET` is set:
    preset ``"chain"`` where :data:`~ngramspec.config.PRESETS` has it, else
    ``NgramConfig.recommended(chain=True)``; ``draft_token_num = num_speculative_tokens + 1``.

    ``cost_aware`` (a cost table is given): the same with ``calibrated_estimates=True,
    shared_pseudo_count=0``, whose path probabilities are calibrated (the cost-aware choice
    weighs each draft by its probability; the chain preset's raw count ratios are not: about
    0.5 for drafts accepted 71% of the time on the shipped streams, 0.25 for 6%).

    Examples
    --------
    >>> cfg = default_config(5)
    >>> cfg.chain, cfg.draft_token_num, cfg.match_type
    (True, 6, 'ADAPTIVE')
    >>> default_config(5, cost_aware=True).calibrated_estimates
    True
    """
    k = _positive_int(num_speculative_tokens, "speculative_config.num_speculative_tokens")
    extra = dict(calibrated_estimates=True, shared_pseudo_count=0.0) if cost_aware else {}
    if "chain" in PRESETS:
        return NgramConfig.preset("chain", chain=True, draft_token_num=k + 1, **extra)
    return NgramConfig.recommended(chain=True, draft_token_num=k + 1, **extra)


def _not_ours(source: str) -> ValueError:
    return ValueError(f"{source}: profile {VLLM_PROFILE!r} is vLLM's own n-gram proposer "
                      "(speculative_config method 'ngram'); ngramspec's Proposer needs an "
                      "SGLang profile (a trie)")


def _check_usable(cfg: NgramConfig, source: str) -> NgramConfig:
    if cfg.vllm:
        raise _not_ours(source)
    return cfg


def resolve_config(num_speculative_tokens: int, *, config: Any = None,
                   environ: Mapping[str, str] | None = None,
                   cost_aware: bool = False) -> NgramConfig:
    """The configuration a :class:`Proposer` runs, for vLLM's ``num_speculative_tokens``.

    Parameters
    ----------
    num_speculative_tokens : int
        vLLM's ``k``: the configuration gets ``draft_token_num = k + 1`` and ``chain=True``.
    config : NgramConfig or str, optional
        Takes the place of the environment: an :class:`~ngramspec.NgramConfig` (its
        ``draft_token_num`` and ``chain`` are set as above), a preset name or TOML text.
    environ : mapping, optional
        Where to read :data:`ENV_CONFIG` and :data:`ENV_PRESET` (default ``os.environ``).
    cost_aware : bool
        A cost table is given: the default (neither variable set) is then
        ``default_config(k, cost_aware=True)``.

    Raises
    ------
    ValueError
        Naming the variable and the field: both variables set, an unknown preset, TOML that
        does not parse or whose ``draft_token_num`` is not ``k + 1`` or whose ``chain`` is
        false, profile ``vllm-0.33`` (vLLM's own proposer; no trie).

    Examples
    --------
    >>> resolve_config(3, environ={"NGRAMSPEC_VLLM_PRESET": "sglang"}).draft_token_num
    4
    >>> resolve_config(3, environ={"NGRAMSPEC_VLLM_CONFIG": "draft_token_num = 8"})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: NGRAMSPEC_VLLM_CONFIG: draft_token_num = 8, but vLLM's num_speculative_tokens = 3...
    """
    k = _positive_int(num_speculative_tokens, "speculative_config.num_speculative_tokens")
    forced = dict(chain=True, draft_token_num=k + 1)
    if isinstance(config, NgramConfig):
        return _check_usable(config.replace(**forced), "config")
    if config is not None and not isinstance(config, str):
        raise TypeError(f"config must be an NgramConfig, a preset name or TOML text, got "
                        f"{type(config).__name__}")
    env = os.environ if environ is None else environ
    if config is not None:
        preset, text, source = (config, None, "config") if config in PRESETS else \
            (None, config, "config")
    else:
        text, preset = env.get(ENV_CONFIG), env.get(ENV_PRESET)
        if text is not None and preset is not None:
            raise ValueError(f"both {ENV_CONFIG} and {ENV_PRESET} are set; set one (a TOML "
                             f"config may name its preset itself: preset = \"NAME\")")
        source = ENV_CONFIG if text is not None else ENV_PRESET
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"{source} = {preset!r} is no preset; presets: "
                             f"{', '.join(PRESETS)}")
        return _check_usable(NgramConfig.preset(preset, **forced), source)
    if text is None:
        return default_config(k, cost_aware=cost_aware)
    try:
        options, _ = toml_options(text)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    given = options.get("draft_token_num")
    if given is not None and given != k + 1:
        raise ValueError(f"{source}: draft_token_num = {given}, but vLLM's "
                         f"num_speculative_tokens = {k} verifies chains of {k} drafts: "
                         f"draft_token_num must be {k + 1} (or left out)")
    if options.get("chain") is False:
        raise ValueError(f"{source}: chain = false, but vLLM verifies chains: chain must be "
                         "true (or left out)")
    if options.get("profile") == VLLM_PROFILE:  # before NgramConfig refuses chain=True there
        raise _not_ours(source)
    name = options.pop("preset", None)
    merged = NgramConfig.preset_options(name) if name is not None else {}
    merged.update(options)
    merged.update(forced)
    try:
        cfg = NgramConfig(**merged)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: {e}") from None
    return _check_usable(cfg, source)
