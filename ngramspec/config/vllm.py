"""A configuration as vLLM's ``--speculative-config``: vLLM's own n-gram proposer, or
ngramspec's drafter through vLLM's ``custom_class`` hook.

vLLM 0.33 runs profile ``vllm-0.33`` itself (``"method": "ngram"``).  Configurations of
profile ``sglang-0.5.23`` with ``chain=True`` run in vLLM through
``ngramspec.integrations.vllm.Proposer`` (``"method": "custom_class"``), which reads the
configuration as TOML text from the environment variable :data:`ENV_CONFIG`.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Callable

__all__ = ["ENV_CONFIG", "ENV_COSTS", "ENV_PRESET", "PROPOSER", "speculative_config",
           "launch_line", "batch_schedule"]

#: The environment variable that carries the configuration (TOML text) to vLLM's processes.
ENV_CONFIG = "NGRAMSPEC_VLLM_CONFIG"
#: The environment variable naming a cost table: the proposer then drafts only where it pays.
ENV_COSTS = "NGRAMSPEC_VLLM_COSTS"
#: The environment variable naming a preset (one of :data:`ngramspec.config.PRESETS`).
ENV_PRESET = "NGRAMSPEC_VLLM_PRESET"
#: The class vLLM's ``custom_class`` method loads.
PROPOSER = "ngramspec.integrations.vllm.Proposer"


#: vLLM's lookup sizes when neither is given, and ngramspec's ``num_speculative_tokens``
#: (vLLM requires one; 5 is the value of vLLM's documented n-gram example).
DEFAULT_LOOKUP = 5
DEFAULT_TOKENS = 5
_INT32_MAX = 2**31 - 1


def resolve(config: Any, check_int: Callable[[str, Any], int],
            sglang_only: tuple[str, ...]) -> None:
    """Resolve and check a ``vllm-0.33`` configuration's fields in place, as vLLM's
    ``SpeculativeConfig`` does: one lookup size given sets the other, neither gives 5 and 5;
    ``draft_token_num`` follows ``num_speculative_tokens`` (+ 1, the root); SGLang's own
    settings (``sglang_only``) must stay at their defaults."""
    lo, hi = config.prompt_lookup_min, config.prompt_lookup_max
    if lo is None and hi is None:
        lo = hi = DEFAULT_LOOKUP
    elif lo is None:
        lo = hi
    elif hi is None:
        hi = lo
    k = DEFAULT_TOKENS if config.num_speculative_tokens is None else config.num_speculative_tokens
    for name, value in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi),
                        ("num_speculative_tokens", k)):
        value = check_int(name, value)
        if not 1 <= value <= _INT32_MAX:
            raise ValueError(f"{name} must be an integer >= 1, got {value}")
        object.__setattr__(config, name, value)
    if config.prompt_lookup_min > config.prompt_lookup_max:
        raise ValueError(f"prompt_lookup_min={config.prompt_lookup_min} must be <= "
                         f"prompt_lookup_max={config.prompt_lookup_max}")
    defaults = type(config).__dataclass_fields__
    changed = [n for n in sglang_only if getattr(config, n) != defaults[n].default]
    if changed:
        raise ValueError(f"{', '.join(changed)}: options of SGLang's profiles, not of "
                         f"{config.profile!r} (its options: prompt_lookup_min, "
                         "prompt_lookup_max, num_speculative_tokens)")
    slots = config.num_speculative_tokens + 1
    if config.draft_token_num is None:
        object.__setattr__(config, "draft_token_num", slots)
    elif check_int("draft_token_num", config.draft_token_num) != slots:
        raise ValueError(f"draft_token_num is num_speculative_tokens + 1 = {slots} in profile "
                         f"{config.profile!r}, got {config.draft_token_num}; set "
                         "num_speculative_tokens")


def speculative_config(config: Any) -> dict[str, Any]:
    """vLLM's ``speculative_config`` for ``config`` (a :class:`~ngramspec.NgramConfig`).

    Raises ``ValueError`` for a configuration vLLM cannot run: trees (vLLM verifies chains
    only) or a window-era profile.

    Examples
    --------
    >>> from ngramspec import NgramConfig
    >>> speculative_config(NgramConfig(profile="vllm-0.33", prompt_lookup_min=2))
    {'method': 'ngram', 'num_speculative_tokens': 5, 'prompt_lookup_min': 2, 'prompt_lookup_max': 2}
    >>> speculative_config(NgramConfig.recommended(chain=True, draft_token_num=6))["model"]
    'ngramspec.integrations.vllm.Proposer'
    """
    if config.vllm:
        return {"method": "ngram", "num_speculative_tokens": config.num_speculative_tokens,
                "prompt_lookup_min": config.prompt_lookup_min,
                "prompt_lookup_max": config.prompt_lookup_max}
    if not config.chain or config.profile != "sglang-0.5.23":
        raise ValueError("vLLM verifies chains only: use profile 'vllm-0.33' (vLLM's n-gram "
                         "proposer) or a profile 'sglang-0.5.23' configuration with "
                         "chain=True (ngramspec's drafter in vLLM)")
    return {"method": "custom_class", "model": PROPOSER,
            "num_speculative_tokens": config.draft_token_num - 1}


def batch_schedule(best_k: dict[int, int]) -> list[list[int]]:
    """vLLM's ``num_speculative_tokens_per_batch_size`` (dynamic speculative decoding, which
    vLLM 0.33 applies to its n-gram proposer) from the best ``k`` at each simulated
    concurrency (0: do not speculate there): level ``c_i`` covers the batch sizes
    ``c_(i-1) + 1 .. c_i``, the first from 1, and vLLM carries the last one's ``k`` to every
    larger batch; neighbours with the same ``k`` merge.

    Examples
    --------
    >>> batch_schedule({1: 7, 8: 5, 16: 5, 48: 0})
    [[1, 1, 7], [2, 16, 5], [17, 48, 0]]
    """
    out: list[list[int]] = []
    start = 1
    for level in sorted(best_k):
        k = int(best_k[level])
        if out and out[-1][2] == k:
            out[-1][1] = level
        else:
            out.append([start, level, k])
        start = level + 1
    return out


def launch_line(config: Any, *, toml_path: str | None = None) -> str:
    """The ``vllm serve`` line that runs ``config`` (``MODEL`` stands for the model): vLLM's
    own proposer needs only its flag; ngramspec's drafter also gets its configuration in
    :data:`ENV_CONFIG` (read from ``toml_path`` if given, else inline).

    Examples
    --------
    >>> from ngramspec import NgramConfig
    >>> print(launch_line(NgramConfig(profile="vllm-0.33", num_speculative_tokens=3)))
    vllm serve MODEL --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 5}'
    >>> line = launch_line(NgramConfig.recommended(chain=True, draft_token_num=6),
    ...                    toml_path="best.toml")
    >>> line.startswith('NGRAMSPEC_VLLM_CONFIG="$(cat best.toml)" vllm serve MODEL')
    True
    """
    flag = "--speculative-config " + shlex.quote(json.dumps(speculative_config(config)))
    if config.vllm:
        return f"vllm serve MODEL {flag}"
    env = (f'{ENV_CONFIG}="$(cat {toml_path})"' if toml_path is not None else
           f"{ENV_CONFIG}={shlex.quote(config.to_toml())}")
    return f"{env} vllm serve MODEL {flag}"
