"""The named starting points of a configuration (``NgramConfig.preset(name)``, ``--preset``
on the command line): the options each sets, which later layers (a TOML file, flags)
override.  What each is for: :meth:`ngramspec.NgramConfig.preset_options`."""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS"]

#: Named starting points (``NgramConfig.preset(name)``, ``--preset`` on the command line).
PRESETS = ("sglang", "recommended", "recommended-cost-aware", "calibrated", "chain", "vllm")
# The options each preset sets (later layers, a TOML file or flags, override them).
_PRESET_OPTIONS: dict[str, dict[str, Any]] = {
    "sglang": {},
    "recommended": dict(index_prompt=True, exact_counts=True, local_index=True,
                        shared_prompt_window=2048, match_type="ADAPTIVE", min_token_prob=0.5, max_spec_factor=1.0,
                        shared_pseudo_count=2.0, max_trie_depth=24, draft_token_num=16),
}
_PRESET_OPTIONS["recommended-cost-aware"] = dict(_PRESET_OPTIONS["recommended"],
                                                 min_expected_accept=4.0)
# The wide trees the calibration table of ``acceptance`` was fitted on (tuning part only), with
# its estimates: the base for ``min_expected_accept="auto"`` with step costs.
_PRESET_OPTIONS["calibrated"] = dict(index_prompt=True, exact_counts=True, local_index=True,
                                     shared_prompt_window=2048, match_type="ADAPTIVE", min_token_prob=0.18,
                                     max_spec_factor=4.0, max_trie_depth=24,
                                     calibrated_estimates=True)

# For vLLM (chains): recommended's drafts cut to chains, tuned on the tuning part under vLLM's
# pricing (benchmarks/studies/tune_chain.py); and vLLM's own n-gram at its defaults.
_PRESET_OPTIONS["chain"] = dict(_PRESET_OPTIONS["recommended"], chain=True, min_token_prob=0.2,
                                max_spec_factor=2.0, draft_token_num=8)
_PRESET_OPTIONS["vllm"] = dict(profile="vllm-0.33")
