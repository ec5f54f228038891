"""Configuration of an n-gram cache: defaults, validation and SGLang server-argument names."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from . import sglang as config_sglang
from . import toml as config_toml
from .checks import check_settings
from .modes import BEYOND_SGLANG, MATCH_MODES, MATCH_TYPES, PROFILES, VLLM_PROFILE, MatchMode
from .presets import _PRESET_OPTIONS, PRESETS

__all__ = ["NgramConfig", "MATCH_TYPES", "MATCH_MODES", "MatchMode", "PROFILES", "PRESETS"]


@dataclass(frozen=True)
class NgramConfig:
    """Settings of an :class:`~ngramspec.NgramCache`, validated on construction.

    Two profiles, each with SGLang's own server defaults and validation rules:

    - ``"sglang-0.5.23"`` (default): a trie of depth ``max_trie_depth``, every suffix of the
      context an anchor, stateful matching per request.
    - ``"sglang-0.5.9"`` (the "window era"): a trie of depth ``branch_length``, anchors only from
      the context suffixes of ``min_match_window_size .. max_match_window_size`` tokens, inserts
      skip the shortest ``min_match_window_size`` suffixes, stateless matching.

    Options of one profile are an error in the other; an option left at ``None`` takes the
    profile's default.  The Other Parameters are options beyond SGLang (``sglang-0.5.23``
    profile only; all off by default, so that the default stays SGLang-exact;
    :meth:`recommended` turns on the combination measured best).

    Parameters
    ----------
    max_trie_depth : int, optional
        ``sglang-0.5.23`` only (default 18).  Longest path stored in the trie; also the length
        of the context tail that SGLang's worker matches and inserts.  Must be > 1.
    min_bfs_breadth, max_bfs_breadth : int
        BFS breadth of the longest and of the shortest anchor; ``max_bfs_breadth`` is also
        PROB's ``top_k``.  ``0 < min_bfs_breadth <= max_bfs_breadth``.  Defaults 1 and 10.
    draft_token_num : int, optional
        Size of the draft tree *including the root* (SGLang's meaning); the budget of drafted
        nodes is ``draft_token_num - 1``.  Must be > 0.  Default 12 in ``sglang-0.5.23``; in
        ``sglang-0.5.9`` ``max_match_window_size`` (12 by default), as that server resolved it.
    match_type : {"BFS", "PROB", "ADAPTIVE"}
        ``"BFS"`` expands by recency, ``"PROB"`` best-first by frequency (SGLang's two);
        ``"ADAPTIVE"`` is ngramspec's own (see below).  (The 0.5.9 server
        never passed this option to its cache and always ran BFS; this profile honours it.)
    capacity : int
        Trie nodes, root included.  Must exceed the trie depth (``max_trie_depth`` or
        ``branch_length``): SGLang crashes or aborts for smaller capacities; we refuse them up
        front.  Default 10,000,000.
    profile : {"sglang-0.5.23", "sglang-0.5.9", "vllm-0.33"}
        Which release's drafter to reproduce: SGLang's two eras, or vLLM 0.33's n-gram
        (prompt lookup) proposer, which :func:`~ngramspec.simulate` replays exactly (it has
        no trie: no cache or :class:`~ngramspec.Drafter` takes it).

    Other Parameters
    ----------------
    index_prompt : bool
        :class:`~ngramspec.Drafter` indexes each request's whole prompt when it is added
        (SGLang's worker only ever inserts the last ``max_trie_depth`` prompt tokens).
    exact_counts : bool
        :class:`~ngramspec.Drafter` counts every n-gram occurrence once: it inserts only the
        n-grams that end at newly appended tokens, as soon as they are appended, instead of
        re-inserting the overlapping window every step (which counts the same occurrence many
        times and delays the newest tokens by a step).
    local_index : bool
        :class:`~ngramspec.Drafter` keeps a per-request index of the request's own prompt and
        output (exact counts of every n-gram up to ``max_trie_depth`` tokens) beside the
        shared trie, which then receives a request's sequence when it finishes (once the
        next ``propose`` has drafted, in the cache's insert thread: no step waits for it);
        ADAPTIVE
        drafts from the request's own index first.  Its model is a trie that never evicts;
        the compiled backend holds it as a suffix automaton (``engine/serving/own_index.py``): built
        at admission in well under a microsecond per prompt token, about 100 bytes per
        token, and a step's append costs O(tokens appended) whatever the context's length.
        It holds at most :attr:`own_window` tokens (5,000,000 at the default capacity); a
        request that outgrows that is re-indexed from its last ``own_window // 2`` tokens.
    shared_prompt_window : int, optional
        With ``local_index`` and ``exact_counts`` (no effect otherwise), ``>= 0``: a finished
        request teaches the shared trie its output and the n-grams ending in its prompt's last
        ``shared_prompt_window`` tokens only (None: its whole prompt), a cost of O(tokens x
        depth) in the insert thread that the next draft waits for (24 ms at 16k tokens).
        ``recommended()``: 2048, beyond every shipped recording's prompt.  At most 2**31 - 1.
    match_type : "ADAPTIVE"
        Best-first expansion by an estimated path probability (products of
        ``freq(child) / freq(node)``), anchors longest first, into one tree; per-slot
        probabilities and the expected accept length are on the :class:`~ngramspec.DraftBatch`.
    min_token_prob : float
        ADAPTIVE only: candidates less probable than this are not drafted (0 = fill the
        budget).
    max_spec_factor : float
        ADAPTIVE only: an anchor of length ``d`` drafts at most ``max(1, int(factor * d))``
        nodes (0 = no such cap): short matches earn short drafts.
    min_expected_accept : float or "auto"
        ADAPTIVE only: draft nothing when the expected accept length (``1 +`` the sum of the
        drafted probabilities) is below this: a step without drafts can run as a plain decode.
        The break-even of a cost model (verify time / decode time) is the natural value.
        ``"auto"``: per step, cut the trees of the batch to the size (possibly none) that
        maximises the expected emitted tokens per unit of step time, from step costs given to
        the drafter (``costs=``; see :mod:`ngramspec.config.acceptance_table`).
    shared_pseudo_count : float
        ADAPTIVE only (0 = off): the shared trie's estimates count for less where their
        context is short.  Below a shared-trie node that continues a context of ``n`` tokens
        (the anchor's length plus the depth below it), ``P(child) = freq(child) / (total +
        shared_pseudo_count / n)``: n-grams learned from other requests predict a request's
        next token less often than their counts say when the match is short (measured on the
        tuning part), while long matches keep their counts.
    calibrated_estimates : bool
        ADAPTIVE only: score candidates by calibrated probabilities (fitted on recorded
        traffic: by source, matched length, count and rank;
        :mod:`ngramspec.config.acceptance_table`) instead of count ratios, which are optimistic on
        rare n-grams.  An alternative to
        ``shared_pseudo_count`` (both replace the count ratios), so not combined with it.
    external_sam_budget : int
        ``sglang-0.5.23`` BFS/PROB only (default 0: corpora off).  Draft nodes per tree that
        the loaded external corpora share (:meth:`~ngramspec.NgramCache.add_corpus`);
        ``0 <= external_sam_budget <= draft_token_num - 1``.
    external_corpus_max_tokens : int
        Cap on the tokens (separators included) of all loaded corpora together (default
        10,000,000); at least 1.
    chain : bool
        Send one chain per request, not a tree (:meth:`~ngramspec.DraftBatch.chains`: the
        path with the most expected accepted tokens), for engines that verify chains only
        (vLLM; ``--engine vllm``).
    branch_length : int, optional
        ``sglang-0.5.9`` only (default 18).  Longest path stored in the trie (renamed
        ``max_trie_depth`` later); the worker inserts the last ``branch_length`` tokens.
        Must be > 1.
    min_match_window_size, max_match_window_size : int, optional
        ``sglang-0.5.9`` only (defaults 1 and 12).  Context suffixes of these lengths are
        matched; the worker sends the last ``max_match_window_size`` tokens.  Inserts skip the
        suffixes of ``min_match_window_size`` tokens or fewer.
        ``0 < min_match_window_size <= max_match_window_size < branch_length``.
    prompt_lookup_min, prompt_lookup_max : int, optional
        ``vllm-0.33`` only: suffix lengths vLLM's n-gram proposer looks up in the request's
        own tokens (:mod:`ngramspec.reference.lookup`); neither given, 5 and 5; one given,
        the other equals it (vLLM's resolution).
    num_speculative_tokens : int, optional
        ``vllm-0.33`` only: the chain's length at most (vLLM requires it; default 5 here).
        ``draft_token_num`` is ``num_speculative_tokens + 1`` (the root, as in SGLang).

    Examples
    --------
    >>> cfg = NgramConfig(max_bfs_breadth=8, draft_token_num=16)
    >>> cfg.budget
    15
    >>> NgramConfig(capacity=18)
    Traceback (most recent call last):
    ...
    ValueError: capacity must be greater than max_trie_depth (18), got 18: ...
    >>> old = NgramConfig(profile="sglang-0.5.9")
    >>> (old.branch_length, old.min_match_window_size, old.max_match_window_size,
    ...  old.draft_token_num, old.max_trie_depth)
    (18, 1, 12, 12, None)
    >>> NgramConfig(profile="sglang-0.5.9", max_trie_depth=18)
    Traceback (most recent call last):
    ...
    ValueError: max_trie_depth is an option of profile 'sglang-0.5.23', not of 'sglang-0.5.9' ...
    >>> v = NgramConfig(profile="vllm-0.33", prompt_lookup_max=4, num_speculative_tokens=3)
    >>> (v.prompt_lookup_min, v.prompt_lookup_max, v.num_speculative_tokens, v.draft_token_num)
    (4, 4, 3, 4)
    """

    max_trie_depth: int | None = None
    min_bfs_breadth: int = 1
    max_bfs_breadth: int = 10
    draft_token_num: int | None = None
    match_type: Literal["BFS", "PROB", "ADAPTIVE"] = "BFS"
    capacity: int = 10_000_000
    profile: str = "sglang-0.5.23"
    branch_length: int | None = None
    min_match_window_size: int | None = None
    max_match_window_size: int | None = None
    index_prompt: bool = False
    exact_counts: bool = False
    local_index: bool = False
    shared_prompt_window: int | None = None
    min_token_prob: float = 0.0
    max_spec_factor: float = 0.0
    min_expected_accept: float | Literal["auto"] = 0.0
    shared_pseudo_count: float = 0.0
    external_sam_budget: int = 0
    external_corpus_max_tokens: int = 10_000_000
    calibrated_estimates: bool = False
    chain: bool = False
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    num_speculative_tokens: int | None = None

    def __post_init__(self) -> None:
        check_settings(self)  # (each value checked, and normalised in place)

    @property
    def sglang_exact(self) -> bool:
        """True when no option beyond SGLang is on: the drafts are SGLang's, bit for bit
        (False for profile ``vllm-0.33``, whose drafts are vLLM's: see :attr:`vllm`)."""
        return self.match_type != "ADAPTIVE" and not self.vllm and not any(
            getattr(self, n) for n in BEYOND_SGLANG)

    @property
    def vllm(self) -> bool:
        """Profile ``vllm-0.33``: vLLM's n-gram proposer (a chain per request, no trie)."""
        return self.profile == VLLM_PROFILE

    @property
    def chains(self) -> bool:
        """The drafts are chains, as vLLM verifies them (``vllm-0.33`` or ``chain=True``)."""
        return self.vllm or self.chain

    @classmethod
    def recommended(cls, **overrides: Any) -> "NgramConfig":
        """The options beyond SGLang tuned on the tuning part of the shipped recorded streams
        (:mod:`ngramspec.sweep.split`): prompt indexing, a per-request index, exact counts,
        ADAPTIVE drafts with ``min_token_prob=0.5``, ``max_spec_factor=1``,
        ``shared_pseudo_count=2``, ``max_trie_depth=24`` and ``draft_token_num=16``.

        Tuned for tokens per verify step *at the same draft tokens per step* as Arctic's
        suffix decoding, in every task group (``benchmarks/studies/tune_recommended.py``): few,
        confident drafts (about 2.5 per step), each worth more than Arctic's.  On the
        hold-out part it emits 1.24 times Arctic's tokens per step at its width (every group
        at least 1.08 times; docs/reports/beyond-sglang.md).  Where a verify pass costs the
        same whatever the tree size, wider trees emit more tokens per step: ``min_token_prob=0.18,
        max_spec_factor=4, shared_pseudo_count=0, draft_token_num=12`` (this method's
        settings before) drafts about 5.5 tokens per step for 13% more tokens per step.  For
        a cost-aware drafter add ``min_expected_accept``: measured on the tuning part, 4.0
        keeps every task group at or above break-even under a verify step 2.46 times a
        decode step.

        Examples
        --------
        >>> cfg = NgramConfig.recommended(capacity=1_000_000)
        >>> cfg.match_type, cfg.local_index, cfg.sglang_exact
        ('ADAPTIVE', True, False)
        """
        options: dict[str, Any] = dict(_PRESET_OPTIONS["recommended"])
        options.update(overrides)
        return cls(**options)

    @property
    def mode(self) -> MatchMode:
        """The :class:`MatchMode` of ``match_type``."""
        return MATCH_MODES[self.match_type]

    @property
    def trie_depth(self) -> int:
        """Longest path stored in the trie: ``max_trie_depth`` or (0.5.9) ``branch_length``."""
        if self.vllm:
            raise ValueError(f"profile {VLLM_PROFILE!r} (vLLM's n-gram proposer) has no trie: "
                             "simulate it; a cache or Drafter needs an SGLang profile")
        depth = self.max_trie_depth if self.profile == "sglang-0.5.23" else self.branch_length
        assert depth is not None
        return depth

    @property
    def own_window(self) -> int:
        """``local_index``: the most tokens a request's own index holds, ``max(capacity // 2,
        4 * trie_depth)`` (its automaton then has at most ``capacity`` states, the shared
        trie's bound in nodes).  A request that outgrows it is re-indexed from its last
        ``own_window // 2`` tokens at the append that would overfill it: far beyond any
        model's context at the default capacity (5,000,000 tokens)."""
        return max(self.capacity // 2, 4 * self.trie_depth)

    @property
    def stateful(self) -> bool:
        """Whether matching keeps per-request state (0.5.23); 0.5.9 matching is stateless."""
        return self.profile == "sglang-0.5.23"

    @property
    def match_length(self) -> int:
        """Tokens of each request's tail that SGLang's worker matches: ``max_trie_depth``, or
        (0.5.9) ``max_match_window_size``."""
        n = self.max_trie_depth if self.stateful else self.max_match_window_size
        assert n is not None
        return n

    @property
    def insert_length(self) -> int:
        """Tokens of each request's tail that SGLang's worker inserts per step:
        ``max_trie_depth``, or (0.5.9) ``branch_length``."""
        return self.trie_depth

    @property
    def budget(self) -> int:
        """Drafted nodes per tree, root excluded: ``draft_token_num - 1``."""
        return self.draft_token_num - 1

    def replace(self, **changes: Any) -> "NgramConfig":
        """A copy with some fields changed, validated again."""
        if self.vllm and "draft_token_num" not in changes:
            changes["draft_token_num"] = None  # follows num_speculative_tokens
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_sglang_args(cls, args: Mapping[str, Any]) -> "NgramConfig":
        """Build a config from SGLang server arguments, choosing the profile by their names.

        Names may use ``-`` or ``_`` and may carry the leading ``--`` and ``speculative_``:
        ``speculative_ngram_X`` maps to ``X``, ``speculative_num_draft_tokens`` to
        ``draft_token_num``.  ``speculative_algorithm``, if given, must be ``"NGRAM"``.  A value
        of ``None`` means "not set" (SGLang's resolution to the default).

        The profile follows the names: ``branch_length`` or ``min/max_match_window_size`` give
        ``"sglang-0.5.9"``; ``max_trie_depth`` (or the external-corpus arguments) give
        ``"sglang-0.5.23"``, as do the names both releases share alone.  Names of both eras
        together are an error.  A 0.5.9 server ignored ``match_type`` (it always ran BFS); this
        profile honours it, so leave it at ``"BFS"`` to reproduce such a server.

        ``external_sam_budget`` and ``external_corpus_max_tokens`` become fields (validated
        as :class:`NgramConfig` does); ``external_corpus_path`` is checked as SGLang checks it
        (it then requires a budget > 0) but a config holds no corpus: load it into the cache
        with :meth:`NgramCache.add_corpus(path, documents) <ngramspec.NgramCache.add_corpus>`.

        Examples
        --------
        >>> cfg = NgramConfig.from_sglang_args({"--speculative-ngram-max-bfs-breadth": 8,
        ...                                     "speculative_num_draft_tokens": 16})
        >>> (cfg.profile, cfg.max_bfs_breadth, cfg.draft_token_num)
        ('sglang-0.5.23', 8, 16)
        >>> old = NgramConfig.from_sglang_args({"speculative_ngram_max_match_window_size": 8,
        ...                                     "speculative_ngram_branch_length": 12})
        >>> (old.profile, old.branch_length, old.max_match_window_size, old.draft_token_num)
        ('sglang-0.5.9', 12, 8, 8)
        """
        fields, corpus_path = config_sglang.fields_of(args)
        config = cls(**fields)
        if corpus_path and config.external_sam_budget <= 0:  # SGLang checks it only then
            raise ValueError("speculative_ngram_external_sam_budget must be > 0 when "
                             "speculative_ngram_external_corpus_path is given")
        return config

    # --- presets, TOML files and SGLang server arguments ------------------------------------

    @staticmethod
    def preset_options(name: str) -> dict[str, Any]:
        """The options a preset sets (a copy), to layer other options over.

        ``"sglang"``: none (SGLang's server defaults); ``"recommended"``: those of
        :meth:`recommended`; ``"recommended-cost-aware"``: those plus
        ``min_expected_accept=4.0`` (the value measured on the tuning part to keep every task
        group at or above break-even under a verify step 2.46 times a decode step);
        ``"calibrated"``: wide ADAPTIVE trees (``min_token_prob=0.18``, ``max_spec_factor=4``,
        ``max_trie_depth=24``) scored by the calibrated estimates of
        :mod:`ngramspec.config.acceptance_table` (the settings its table was fitted on), the base for
        ``min_expected_accept="auto"``.  For vLLM, which verifies chains: ``"chain"``,
        ``recommended`` cut to chains of up to 7 tokens (``min_token_prob=0.2``,
        ``max_spec_factor=2``; tuned under vLLM's pricing, docs/vllm.md), and ``"vllm"``,
        vLLM's own n-gram proposer at its defaults (profile ``vllm-0.33``).

        Examples
        --------
        >>> NgramConfig.preset_options("recommended-cost-aware")["min_expected_accept"]
        4.0
        """
        if not isinstance(name, str) or name not in _PRESET_OPTIONS:
            raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
        return dict(_PRESET_OPTIONS[name])

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "NgramConfig":
        """A named configuration (one of :data:`PRESETS`), with some options overridden.

        Examples
        --------
        >>> NgramConfig.preset("sglang") == NgramConfig()
        True
        >>> NgramConfig.preset("recommended", capacity=1_000_000) == \\
        ...     NgramConfig.recommended(capacity=1_000_000)
        True
        >>> NgramConfig.preset("fast")
        Traceback (most recent call last):
        ...
        ValueError: unknown preset 'fast'; presets: sglang, recommended, recommended-cost-aware,
        calibrated, chain, vllm
        """
        options = cls.preset_options(name)
        options.update(overrides)
        return cls(**options)

    def to_toml(self, *, preset: str | None = None) -> str:
        """This configuration as TOML text: one ``name = value`` line per set field or, with
        ``preset``, a ``preset = "NAME"`` line and only the fields that differ from that
        preset (what :meth:`from_toml` and ``--config FILE`` layer over it).

        :meth:`from_toml` reads it back into an equal config; ``--config FILE`` on the
        command line takes the same file (alone, or after ``--preset`` naming the same
        preset).

        Examples
        --------
        >>> text = NgramConfig(match_type="PROB", draft_token_num=8).to_toml()
        >>> print(text.splitlines()[4])
        draft_token_num = 8
        >>> NgramConfig.from_toml(text) == NgramConfig(match_type="PROB", draft_token_num=8)
        True
        >>> cfg = NgramConfig.recommended(draft_token_num=8)
        >>> print(cfg.to_toml(preset="recommended").splitlines()[1:])
        ['preset = "recommended"', 'draft_token_num = 8']
        >>> NgramConfig.from_toml(cfg.to_toml(preset="recommended")) == cfg
        True
        """
        items = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]
        if preset is None:
            return config_toml.render(
                f"ngramspec NgramConfig (profile {self.profile}); read it with "
                "NgramConfig.from_toml or ngramspec simulate --config FILE", items)
        under = NgramConfig.preset(preset)
        diff = [(k, v) for k, v in items if v is not None and v != getattr(under, k)]
        try:
            same = NgramConfig.preset(preset, **dict(diff)) == self
        except (TypeError, ValueError):
            same = False
        if not same:
            # A field the preset sets that this configuration leaves unset (another
            # profile's): not expressible over that preset; over SGLang's defaults it is.
            preset = "sglang"
            diff = [(k, v) for k, v in items if v is not None and v != getattr(NgramConfig(), k)]
        return config_toml.render(
            f"ngramspec NgramConfig: preset {preset}, then the fields below; read it with "
            f"--config FILE (alone, or with --preset {preset}) or NgramConfig.from_toml",
            [("preset", preset)] + diff)

    @classmethod
    def from_toml(cls, source: "str | os.PathLike[str]") -> "NgramConfig":
        """Read a configuration written by :meth:`to_toml` (or by hand).

        Parameters
        ----------
        source : str or path
            TOML text (a ``str``), or a file (a :class:`pathlib.Path` or other path object).
            Top-level keys are :class:`NgramConfig` fields, and ``preset`` (one of
            :data:`PRESETS`), the preset the fields go over (as :meth:`to_toml` with
            ``preset`` writes it); fields not given take the preset's values, or their
            defaults.  Python < 3.11 needs ``tomli`` (``pip install 'ngramspec[toml]'``).

        Raises
        ------
        ValueError
            Naming the file (or ``TOML``) and the field: TOML syntax, unknown fields,
            mistyped values (``draft_token_num = "8"``), values the config refuses.

        Examples
        --------
        >>> NgramConfig.from_toml('match_type = "PROB"\\nmax_bfs_breadth = 4').max_bfs_breadth
        4
        >>> NgramConfig.from_toml('max_bfs_breadht = 4')
        Traceback (most recent call last):
        ...
        ValueError: TOML: unknown field 'max_bfs_breadht' (did you mean 'max_bfs_breadth'?); ...
        """
        options, where = toml_options(source)
        preset = options.pop("preset", None)
        try:
            return cls(**{**(cls.preset_options(preset) if preset else {}), **options})
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e}") from None

    def to_sglang_args(self, *, plugin: bool = False) -> dict[str, Any]:
        """SGLang server arguments that run this configuration: ``from_sglang_args`` of the
        result gives this config back.

        ``plugin=True``: the arguments of a server that runs it through ngramspec's drafter
        (``ngramspec sglang-launch``, see ``docs/sglang.md``), for any configuration of
        profile ``sglang-0.5.23``: SGLang's arguments for what its worker reads itself (the
        draft slots, the trie depth that cuts its windows; ``match_type`` ``"BFS"`` where
        SGLang has no such type), plus ``"ngramspec_config"``, this configuration as TOML
        text, which switches the plugin on (the launcher hands it to the server's processes).

        Keys are SGLang's argument names (``speculative_algorithm``,
        ``speculative_num_draft_tokens``, ``speculative_ngram_...``); every option is given,
        defaults included.  On the command line they are ``--speculative-...`` flags.

        Raises
        ------
        ValueError
            When the configuration is not SGLang-exact (naming the options SGLang lacks and
            the alternative: ``plugin=True``, the flags of ``ngramspec sglang-launch``), or
            is a window-era (0.5.9) configuration with ``match_type="PROB"``, which those
            servers ignored (they always ran BFS).  With ``plugin=True``: a profile other
            than ``sglang-0.5.23``.

        Examples
        --------
        >>> args = NgramConfig(max_bfs_breadth=8, draft_token_num=16).to_sglang_args()
        >>> args["speculative_num_draft_tokens"], args["speculative_ngram_max_bfs_breadth"]
        (16, 8)
        >>> NgramConfig.from_sglang_args(args) == NgramConfig(max_bfs_breadth=8,
        ...                                                   draft_token_num=16)
        True
        >>> NgramConfig.recommended().to_sglang_args()
        Traceback (most recent call last):
        ...
        ValueError: SGLang has no option for index_prompt=True, ...: to_sglang_args(plugin=True) ...
        >>> args = NgramConfig.recommended().to_sglang_args(plugin=True)
        >>> args["speculative_num_draft_tokens"], args["speculative_ngram_max_trie_depth"]
        (16, 24)
        >>> NgramConfig.from_toml(args["ngramspec_config"]) == NgramConfig.recommended()
        True
        """
        return config_sglang.args_of(self, plugin=plugin)


def toml_options(source: "str | os.PathLike[str]") -> tuple[dict[str, Any], str]:
    """The options a TOML config gives (field name to value, types checked, unvalidated) and
    the name of the source for messages: the file name, or ``"TOML"`` for text.  A
    ``preset = "NAME"`` line comes back as ``"preset"`` (one of :data:`PRESETS`).

    Raises ``ValueError`` naming the source and the field at fault.
    """
    return config_toml.read_options(source, dataclasses.fields(NgramConfig), presets=PRESETS)
