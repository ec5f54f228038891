"""The match modes and profiles a configuration chooses from: the table the package reads
rather than testing modes by name (the first place to change when adding a mode), and the
fields each profile has."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MatchMode", "MATCH_MODES", "MATCH_TYPES", "BEYOND_SGLANG", "AUTO", "PROFILES",
           "VLLM_PROFILE"]


@dataclass(frozen=True)
class MatchMode:
    """What the package needs to know of one ``match_type``, read from this table rather than
    tested by name: the first place to change when adding a mode (see docs/architecture.md)."""

    name: str
    #: SGLang has it: exact by default, and :meth:`NgramConfig.to_sglang_args` passes it on.
    sglang: bool
    #: Children ranked by frequency (PROB): count-ordered trees and corpus automata.
    ranked: bool
    #: Sends ``draft_token_num`` slots every step, padding included (SGLang's); otherwise its
    #: real drafts + the root, and a step where no request has a draft is a plain decode.
    padded: bool
    #: The backend call that drafts it: ``"match"`` (a tree per request from the shared trie,
    #: SGLang's) or ``"match_adaptive"`` (trees scored across the request's sources).
    backend_call: str


#: Every match mode, by ``match_type``.
MATCH_MODES: dict[str, MatchMode] = {m.name: m for m in (
    MatchMode("BFS", sglang=True, ranked=False, padded=True, backend_call="match"),
    MatchMode("PROB", sglang=True, ranked=True, padded=True, backend_call="match"),
    MatchMode("ADAPTIVE", sglang=False, ranked=False, padded=False,
              backend_call="match_adaptive"),
)}
MATCH_TYPES = tuple(MATCH_MODES)
#: Options beyond SGLang (all off by default): what ``Drafter`` and the ADAPTIVE builder add.
BEYOND_SGLANG = ("index_prompt", "exact_counts", "local_index", "min_token_prob",
                 "max_spec_factor", "min_expected_accept", "shared_pseudo_count",
                 "calibrated_estimates", "chain")
ADAPTIVE_ONLY = ("min_token_prob", "max_spec_factor", "min_expected_accept",
                  "shared_pseudo_count")
#: ``min_expected_accept`` may also be this: the tree size chosen from step costs.
AUTO = "auto"
ADAPTIVE_MAX_DRAFT = 256
#: Releases whose drafter can be reproduced; the first is the default.  ``vllm-0.33`` is
#: vLLM's n-gram (prompt lookup) proposer: no trie, a chain from the request's own tokens.
PROFILES = ("sglang-0.5.23", "sglang-0.5.9", "vllm-0.33")
#: The profile of vLLM's n-gram proposer.
VLLM_PROFILE = "vllm-0.33"

INT32_MAX = 2**31 - 1

# Fields that exist in one profile only, and their defaults there (SGLang's server defaults).
# draft_token_num is shared but resolved per profile (see NgramConfig).
PROFILE_FIELDS: dict[str, dict[str, int]] = {
    "sglang-0.5.23": {"max_trie_depth": 18},
    "sglang-0.5.9": {"branch_length": 18, "min_match_window_size": 1,
                     "max_match_window_size": 12},
    # Resolved as vLLM resolves them (config_vllm.resolve).
    VLLM_PROFILE: {"prompt_lookup_min": 5, "prompt_lookup_max": 5, "num_speculative_tokens": 5},
}
# SGLang-only settings a vllm-0.33 configuration must leave at their defaults.
SGLANG_ONLY = ("min_bfs_breadth", "max_bfs_breadth", "match_type")
