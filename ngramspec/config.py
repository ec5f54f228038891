"""Configuration of an n-gram cache: defaults, validation and SGLang server-argument names."""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Any, Literal, Mapping

__all__ = ["NgramConfig", "MATCH_TYPES", "PROFILES"]

MATCH_TYPES = ("BFS", "PROB")
PROFILES = ("sglang-0.5.23",)

_INT32_MAX = 2**31 - 1

# SGLang 0.5.23 server-argument names (after dropping "--", "speculative_" and "ngram_") that map
# onto our fields; the external-corpus arguments exist there but are not supported here.
_SGLANG_ARG_FIELDS = {
    "max_trie_depth": "max_trie_depth",
    "min_bfs_breadth": "min_bfs_breadth",
    "max_bfs_breadth": "max_bfs_breadth",
    "match_type": "match_type",
    "capacity": "capacity",
    "num_draft_tokens": "draft_token_num",
}
_SGLANG_UNSUPPORTED = ("external_corpus_path", "external_sam_budget", "external_corpus_max_tokens")


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


@dataclass(frozen=True)
class NgramConfig:
    """Settings of an :class:`~ngramspec.NgramCache`, validated on construction.

    The defaults are SGLang 0.5.23's server defaults for ``--speculative-algorithm NGRAM``.

    Parameters
    ----------
    max_trie_depth : int
        Longest path stored in the trie; also the length of the context tail that is matched
        and inserted.  Must be > 1.
    min_bfs_breadth, max_bfs_breadth : int
        BFS breadth of the deepest and of the shallowest anchor; ``max_bfs_breadth`` is also
        PROB's ``top_k``.  ``0 < min_bfs_breadth <= max_bfs_breadth``.
    draft_token_num : int
        Size of the draft tree *including the root* (SGLang's meaning); the budget of drafted
        nodes is ``draft_token_num - 1``.  Must be > 0.
    match_type : {"BFS", "PROB"}
        ``"BFS"`` expands by recency, ``"PROB"`` best-first by frequency.
    capacity : int
        Trie nodes, root included.  Must exceed ``max_trie_depth`` (SGLang crashes or aborts
        for ``capacity <= max_trie_depth``; we refuse it up front).
    profile : {"sglang-0.5.23"}
        Which SGLang release's behaviour to reproduce.

    Examples
    --------
    >>> cfg = NgramConfig(max_bfs_breadth=8, draft_token_num=16)
    >>> cfg.budget
    15
    >>> NgramConfig(capacity=18)
    Traceback (most recent call last):
    ...
    ValueError: capacity must be greater than max_trie_depth (18), got 18: ...
    """

    max_trie_depth: int = 18
    min_bfs_breadth: int = 1
    max_bfs_breadth: int = 10
    draft_token_num: int = 12
    match_type: Literal["BFS", "PROB"] = "BFS"
    capacity: int = 10_000_000
    profile: str = "sglang-0.5.23"

    def __post_init__(self) -> None:
        for name in ("max_trie_depth", "min_bfs_breadth", "max_bfs_breadth", "draft_token_num",
                     "capacity"):
            object.__setattr__(self, name, _check_int(name, getattr(self, name)))
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, got {self.profile!r}")
        if not isinstance(self.match_type, str):
            raise TypeError(f"match_type must be a str, one of {MATCH_TYPES}, "
                            f"got {type(self.match_type).__name__} {self.match_type!r}")
        if self.match_type not in MATCH_TYPES:
            raise ValueError(f"match_type must be one of {MATCH_TYPES}, got {self.match_type!r}")
        # SGLang's own constructor checks, in its order.
        if self.max_trie_depth <= 1:
            raise ValueError(f"max_trie_depth must be > 1, got {self.max_trie_depth}")
        if self.min_bfs_breadth <= 0:
            raise ValueError(f"min_bfs_breadth must be > 0, got {self.min_bfs_breadth}")
        if self.min_bfs_breadth > self.max_bfs_breadth:
            raise ValueError(f"min_bfs_breadth ({self.min_bfs_breadth}) must be <= "
                             f"max_bfs_breadth ({self.max_bfs_breadth})")
        if self.draft_token_num <= 0:
            raise ValueError(f"draft_token_num must be > 0, got {self.draft_token_num}")
        # What SGLang does not check and crashes on.
        if self.capacity <= self.max_trie_depth:
            raise ValueError(
                f"capacity must be greater than max_trie_depth ({self.max_trie_depth}), got "
                f"{self.capacity}: one insert may need max_trie_depth new nodes plus the root")
        for name in ("max_trie_depth", "max_bfs_breadth", "draft_token_num", "capacity"):
            if getattr(self, name) > _INT32_MAX:
                raise ValueError(f"{name} must fit in int32 (<= {_INT32_MAX}), "
                                 f"got {getattr(self, name)}")

    @property
    def budget(self) -> int:
        """Drafted nodes per tree, root excluded: ``draft_token_num - 1``."""
        return self.draft_token_num - 1

    def replace(self, **changes: Any) -> "NgramConfig":
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_sglang_args(cls, args: Mapping[str, Any]) -> "NgramConfig":
        """Build a config from SGLang server arguments.

        Names may use ``-`` or ``_`` and may carry the leading ``--`` and ``speculative_``:
        ``speculative_ngram_X`` maps to ``X``, ``speculative_num_draft_tokens`` to
        ``draft_token_num``.  ``speculative_algorithm``, if given, must be ``"NGRAM"``.  A value
        of ``None`` means "not set" (SGLang's resolution to the default).

        Examples
        --------
        >>> cfg = NgramConfig.from_sglang_args({"--speculative-ngram-max-bfs-breadth": 8,
        ...                                     "speculative_num_draft_tokens": 16})
        >>> (cfg.max_bfs_breadth, cfg.draft_token_num)
        (8, 16)
        """
        if not isinstance(args, Mapping):
            raise TypeError(f"args must be a mapping of SGLang argument names to values, "
                            f"got {type(args).__name__}")
        known = sorted(["speculative_algorithm", "speculative_num_draft_tokens"]
                       + [f"speculative_ngram_{k}" for k in _SGLANG_ARG_FIELDS
                          if k != "num_draft_tokens"])
        fields: dict[str, Any] = {}
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
            if name in _SGLANG_UNSUPPORTED:
                # Unset (None / 0) is fine; the token cap means nothing without a corpus.
                if value in (None, 0) or name == "external_corpus_max_tokens":
                    continue
                raise ValueError(f"{raw_name}: SGLang's external corpus (suffix automaton) is "
                                 f"not supported by ngramspec")
            if name not in _SGLANG_ARG_FIELDS:
                raise ValueError(f"unknown SGLang argument {raw_name!r}; known: {', '.join(known)}")
            field = _SGLANG_ARG_FIELDS[name]
            if field in fields:
                raise ValueError(f"{raw_name} given twice (as another spelling of {field})")
            if value is not None:
                fields[field] = value
        return cls(**fields)
